"""A Python target for a synthetic ring: writes hsring's synthetic hidden states from numpy
(or torch, with --torch), so hsring's C++ drafter verifies every element. --die-after N
makes it SIGKILL itself with its N-th job bound and half written (crash tests);
--die-before-attach-on-start N makes its N-th start (counted in --starts-file) SIGKILL
itself before it attaches, as the OOM killer does during a model load."""

import argparse
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hsring  # noqa: E402
from synthetic import layer_array  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--torch", action="store_true")
parser.add_argument("--cuda", action="store_true", help="torch CUDA tensors: the device copy path")
parser.add_argument("--die-after", type=int, default=0)
parser.add_argument("--die-before-attach-on-start", type=int, default=0)
parser.add_argument("--starts-file")
args = parser.parse_args()

if args.starts_file:
    with open(args.starts_file, "a+") as f:
        f.write("start\n")
        f.seek(0)
        starts = len(f.readlines())
    if starts == args.die_before_attach_on_start:
        os.kill(os.getpid(), signal.SIGKILL)

producer = hsring.Producer.from_env()
shape = producer.shape
print("target %d epoch %d: %s ring, %d layers of %d" % (
    producer.index, producer.epoch, shape.content, shape.num_layers, shape.hidden_size), flush=True)
for n, job in enumerate(producer, 1):
    layers = [layer_array(shape, job.batch_id, k, job.token_count) for k in range(shape.num_layers)]
    if args.torch:
        import torch
        layers = [torch.from_numpy(a.copy()).view(shape.torch_dtype) for a in layers]
        if args.cuda:
            layers = [t.cuda() for t in layers]
    if args.die_after and n == args.die_after and producer.epoch == 1:
        job.write_layer(0, layers[0])
        os.kill(os.getpid(), signal.SIGKILL)
    job.write_layers(layers)
    job.publish()
producer.close()
