"""The kill loop of bench/chaos_soak.sh: SIGKILLs one random worker of launcher PID every
PERIOD_MS until KILLS kills or MAX_SECONDS; prints the kill count. (In Python: a bash loop
of pgrep and sleep forks managed about 4 kills a second on a loaded 2-core machine.)

    python3 chaos_kill.py LAUNCHER_PID KILLS MAX_SECONDS PERIOD_MS

The launcher's only children are its workers, listed by /proc. Each is killed once: a
killed worker stays listed, a zombie, until the launcher reaps it, and a kill of a zombie
succeeds without killing anything. It is killed once it has lived MIN_AGE_S, so it has
made progress (a synthetic worker publishes or consumes within milliseconds of its start)
and restarts after 100 ms instead of backing off as a crash loop does."""

import os
import random
import signal
import sys
import time

MIN_AGE_S = 0.15


def identity(pid):
    """(pid, start time): a reused pid is another process. None once it is gone or a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else (pid, int(fields[19]))


def main():
    launcher, wanted = int(sys.argv[1]), int(sys.argv[2])
    max_seconds, period = float(sys.argv[3]), int(sys.argv[4]) / 1000
    children = "/proc/%d/task/%d/children" % (launcher, launcher)
    first_seen, killed, kills, started, report = {}, set(), 0, time.monotonic(), 60
    while kills < wanted and time.monotonic() - started < max_seconds:
        time.sleep(period)
        try:
            with open(children) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            break  # the launcher is gone
        now = time.monotonic()
        live = [i for i in map(identity, pids) if i is not None and i not in killed]
        first_seen = {i: first_seen.get(i, now) for i in live}
        ripe = [i for i in live if now - first_seen[i] >= MIN_AGE_S]
        if not ripe:
            continue
        victim = random.choice(ripe)
        try:
            os.kill(victim[0], signal.SIGKILL)
            killed.add(victim)
            kills += 1
        except ProcessLookupError:
            pass
        if now - started >= report:
            print("chaos_soak.sh: %d SIGKILLs in %.0f s" % (kills, now - started),
                  file=sys.stderr, flush=True)
            report += 60
    print(kills)


if __name__ == "__main__":
    main()
