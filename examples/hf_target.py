#!/usr/bin/env python3
"""A Hugging Face transformers target for hsring.

Runs any AutoModelForCausalLM (a local folder or a hub id) on the CPU or a GPU, captures
the ring's layers through output_hidden_states (layer id i is HF hidden_states[i + 1]:
the output of decoder layer i, as everywhere in hsring; for the last layer, whose HF entry
comes after the final norm, a forward hook takes it before the norm), writes the target's greedy
labels (argmax of the logits) and publishes each batch:

    hsring run --model /path/to/hf-folder --targets cpu:1 --drafters cpu:1 \
        --target-cmd 'python3 examples/hf_target.py'

--model defaults to $HSRING_MODEL (what `hsring run --model` was given), so the C++
drafter loads the same embedding and LM head from the same folder. The tokens come from
hsring's shard reader (--data, deterministic by batch id); a packed batch holds several
documents, and each is run as a sequence of its own with the slot's positions (which
restart at 0 per document), so no token attends across a document boundary. On a corpus
with a loss mask the library stores -100 where job.loss_mask is False, whatever greedy
token is written there, as hsring's own targets do.
"""

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.isdir(os.path.join(HERE, "..", "python", "hsring")):
    sys.path.insert(0, os.path.join(HERE, "..", "python"))  # a source checkout

import hsring  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=os.environ.get("HSRING_MODEL"),
                   help="HF folder or hub id (default: $HSRING_MODEL)")
    p.add_argument("--device", default=None,
                   help="cpu, cuda, cuda:N (default: cuda when CUDA_VISIBLE_DEVICES names a GPU "
                        "and torch sees one, else cpu)")
    p.add_argument("--torch-dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="the model's compute dtype (auto: the checkpoint's)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--attn-implementation", default="sdpa")
    return p.parse_args()


def pick_device(arg):
    if arg:
        return torch.device(arg)
    if os.environ.get("CUDA_VISIBLE_DEVICES") and torch.cuda.is_available():
        return torch.device("cuda", 0)
    return torch.device("cpu")


def load_model(name, device, dtype, attn):
    from transformers import AutoModelForCausalLM
    kwargs = {"attn_implementation": attn}
    kwargs["dtype"] = "auto" if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    return model.to(device).eval()


class LastLayerCapture:
    """HF returns its last hidden_states entry after the final norm; hsring's layer id L - 1
    is the last decoder layer's output before it (docs/target-model.md, "Captured layers").
    A forward hook on that layer keeps the un-normed output when the ring asks for it."""

    def __init__(self, model, num_layers):
        self.output = None
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        layers = getattr(decoder, "layers", None)
        if layers is None or len(layers) != num_layers:
            raise SystemExit("hf_target.py: cannot find the decoder layers to capture the last one")
        layers[num_layers - 1].register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self.output = output[0] if isinstance(output, (tuple, list)) else output


@torch.inference_mode()
def forward_batch(model, input_ids, positions, doc_offsets, layer_ids, device, last=None):
    """Per document: (its K captured layers [n, H] each, its greedy labels [n]), run as
    its own sequence so attention stays inside it. Layer id i is hidden_states[i + 1],
    except the last layer (`last`: its hook's output, before the final norm)."""
    ids = torch.from_numpy(input_ids.astype("int64")).to(device)
    pos = torch.from_numpy(positions.astype("int64")).to(device)
    layers = [[] for _ in layer_ids]
    labels = []
    for d in range(len(doc_offsets) - 1):
        s, e = int(doc_offsets[d]), int(doc_offsets[d + 1])
        if e == s:
            continue
        out = model(input_ids=ids[s:e][None], position_ids=pos[s:e][None],
                    output_hidden_states=True, use_cache=False)
        for k, i in enumerate(layer_ids):
            if last is not None and i == len(out.hidden_states) - 2:
                layers[k].append(last.output.reshape(e - s, -1))
            else:
                layers[k].append(out.hidden_states[i + 1][0])
        labels.append(out.logits[0].argmax(-1))
    return [torch.cat(parts) for parts in layers], torch.cat(labels)


def main():
    args = parse_args()
    if not args.model:
        sys.exit("hf_target.py: no --model and no $HSRING_MODEL")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    producer = hsring.Producer.from_env()
    shape = producer.shape
    if shape.content != "model":
        sys.exit("hf_target.py: ring %s carries synthetic batches; run it with --model FOLDER"
                 % producer.ring)
    model = load_model(args.model, device, args.torch_dtype, args.attn_implementation)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if config.hidden_size != shape.hidden_size:
        sys.exit("hf_target.py: the model's hidden size %d is not the ring's %d"
                 % (config.hidden_size, shape.hidden_size))
    if max(shape.layer_ids) >= config.num_hidden_layers:
        sys.exit("hf_target.py: the ring captures layer %d; the model has %d"
                 % (max(shape.layer_ids), config.num_hidden_layers))
    if config.vocab_size > shape.vocab_size:
        print("hf_target.py: warning: the model's vocabulary (%d) is larger than the ring's (%d);"
              " a greedy token beyond it is refused" % (config.vocab_size, shape.vocab_size),
              flush=True)
    last = None
    if config.num_hidden_layers - 1 in shape.layer_ids:
        last = LastLayerCapture(model, config.num_hidden_layers)
    out_dtype = shape.torch_dtype
    print("hf_target %d epoch %d: %s on %s, layers %s, %s ring" % (
        producer.index, producer.epoch, args.model, device, list(shape.layer_ids), shape.dtype),
        flush=True)
    for job in producer:
        layers, labels = forward_batch(model, job.input_ids, job.positions, job.doc_offsets,
                                       shape.layer_ids, device, last)
        job.write_layers([t.to(out_dtype).contiguous() for t in layers])
        job.write_labels(labels.to(torch.int32).cpu())
        job.publish()
    producer.close()


if __name__ == "__main__":
    main()
