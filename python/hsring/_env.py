"""The worker's place in a run, from the launcher's environment (launcher/user_command.h)."""

import os
import signal

from . import _lib


def env_int(name, default=0):
    value = os.environ.get(name, "")
    return int(value) if value else default


def place(role):
    """(ring, index, epoch) of a worker of `role` started by `hsring run`."""
    ring = os.environ.get("HSRING_RING")
    if not ring:
        raise RuntimeError("HSRING_RING is not set: start this worker with `hsring run "
                           "--%s-cmd '...'`, or open it with a ring name" % role)
    got = os.environ.get("HSRING_ROLE", role)
    if got != role:
        raise RuntimeError("HSRING_ROLE is %r: this worker is a %s" % (got, role))
    return ring, env_int("HSRING_INDEX"), env_int("HSRING_EPOCH")


def install_stop_handlers():
    """SIGTERM (the launcher's drain) and SIGINT stop the iteration at its next wait, as they
    stop hsring's own workers; only where Python still has the default handlers."""
    def on_signal(signum, frame):
        _lib.lib().hs_request_stop()
    try:
        for signum in (signal.SIGTERM,):
            if signal.getsignal(signum) in (signal.SIG_DFL, None):
                signal.signal(signum, on_signal)
    except ValueError:  # not the main thread
        pass
