"""Rings for the tests: created with `hsring run --create-only` (what the systemd units do)
and removed afterwards."""

import os
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def hsring_bin():
    return os.path.join(os.environ["HSRING_BIN_DIR"], "hsring")


class TestRing:
    def __init__(self, **shape):
        self.name = "hsring-pytest-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
        flags = {"model": "synthetic", "targets": "cpu:1", "drafters": "cpu:1", "slots": 8,
                 "max-tokens": 32, "hidden-size": 16, "num-layers": 3, "dtype": "fp32",
                 "hs-min-ready": 1, "batches": 0}
        flags.update({k.replace("_", "-"): v for k, v in shape.items()})
        argv = [hsring_bin(), "run", "--create-only", "--ring", self.name]
        for key, value in flags.items():
            if value is None:  # leave the flag out (a model ring: the model's own)
                continue
            if value is False:
                argv.append("--no-" + key)
            else:
                argv += ["--" + key, str(value)]
        subprocess.run(argv, check=True, capture_output=True)

    def remove(self):
        subprocess.run([hsring_bin(), "ring", "remove", "--force", self.name],
                       capture_output=True)


@pytest.fixture
def make_ring():
    rings = []

    def make(**shape):
        rings.append(TestRing(**shape))
        return rings[-1]
    yield make
    for ring in rings:
        ring.remove()
