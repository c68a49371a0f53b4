// The Python model file of the DFlash export (checkpoint/modeling_dflash.py), embedded at
// build time (cmake/embed_text.cmake) so the exporter writes it beside config.json.
#pragma once

#include <string_view>

namespace hsring::checkpoint {

// The text of modeling_dflash.py.
std::string_view dflash_modeling_source();

}  // namespace hsring::checkpoint
