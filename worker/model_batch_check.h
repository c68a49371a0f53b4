// What a drafter can check of a model batch it did not compute: the invariants every
// batch of a model ring keeps (documents tile the tokens, positions restart per document,
// tokens and labels are in the vocabulary or, for labels, kIgnoreLabel (masked out),
// hidden states are finite). A torn or stale slot
// breaks them with high probability; a model batch has no reference to compare bytes with.
#pragma once

#include <cstdint>
#include <string>

namespace hsring {

class Ring;
class SlotView;

// "" when the metadata of a claimed batch (header counts, tokens, positions, document
// offsets, labels) is consistent, else the first problem found.
std::string check_model_metadata(const SlotView& batch);
// The same for slot `slot`, its header read now.
std::string check_model_metadata(const Ring& ring, uint32_t slot);
// check_model_metadata, then every captured element of the batch's rows is finite.
std::string check_model_batch(const Ring& ring, uint32_t slot);

}  // namespace hsring
