// What one DFlash training step costs in FLOPs, as bench/drafter_step_bench reports its
// rate and as hsring run's --split auto weighs drafters against targets
// (launcher/gpu_split.h).
#pragma once

#include "train/dflash_config.h"

namespace hsring::train {

// A step (forward, backward) over `tokens` context tokens with `blocks` anchored blocks
// whose queries see `attention_pairs` query-key pairs in all: the context's fc projection
// and k/v, every draft layer over the blocks' rows (the last layer's o_proj and MLP over
// the scored rows only, as CudaDflashTrainer runs it), the frozen head over the scored rows
// (forward and input gradient), and the block attention.
double dflash_step_flops(const DflashConfig& config, double tokens, double blocks,
                         double attention_pairs);

}  // namespace hsring::train
