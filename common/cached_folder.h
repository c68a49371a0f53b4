// A cache folder made once and reused after (the built-in corpus, target and data): built
// into a private staging folder beside it and renamed into place, so no reader ever sees a
// half-built one, and of the processes or threads that build it at once one wins and the
// others use its folder.
#pragma once

#include <filesystem>
#include <functional>

#include "common/error.h"

namespace hsring {

// `dir` as it is when holds(dir); else build(staging) into a new private folder beside
// `dir` (its parent is created), renamed to `dir`. A `dir` that is there but does not hold
// (left broken by an earlier writer, or by this build) is removed and built again, three
// times at most.
// Throws Error(`io`) naming `dir` when it cannot be placed; what build throws passes
// through, the staging folder removed.
std::filesystem::path cached_folder(const std::filesystem::path& dir,
                                    const std::function<bool(const std::filesystem::path&)>& holds,
                                    const std::function<void(const std::filesystem::path&)>& build,
                                    Errc io);

}  // namespace hsring
