"""User-command workers under `hsring run`: Python targets feeding hsring's C++ drafter
(which verifies every element), C++ targets feeding a Python drafter, Python targets that
SIGKILL themselves mid-batch, and commands that are missing, exit at once or never attach.
Every run must end with 0 torn, 0 lost and 0 duplicated batches."""

import json
import os
import subprocess
import sys
import uuid

from conftest import hsring_bin

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.environ.get("HSRING_TEST_PYTHON", sys.executable)


def run(tmp_path, *flags, timeout=120):
    ring = "hsring-pytest-run-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    summary = tmp_path / "summary.json"
    argv = [hsring_bin(), "run", "--ring", ring, "--model", "synthetic", "--quiet",
            "--slots", "8", "--max-tokens", "64", "--hidden-size", "32",
            "--summary-json", str(summary), "--log-dir", str(tmp_path / "logs")] + list(flags)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    result = json.loads(summary.read_text()) if summary.exists() else None
    return done, result


def assert_intact(done, result, batches):
    assert done.returncode == 0, done.stderr
    assert result["batches_torn"] == 0
    assert result["batches_lost"] == 0
    assert result["batches_duplicated"] == 0
    assert result["batches_consumed"] >= batches


def target_cmd(*args):
    return "%s %s %s" % (PYTHON, os.path.join(HERE, "synthetic_target.py"), " ".join(args))


def test_python_targets_feed_the_cpp_drafter(tmp_path):
    # One target writes numpy, the ring is bf16 so the other path (torch bf16) is covered
    # by a second run below; hsring-drafter checks every element of every batch.
    done, result = run(tmp_path, "--targets", "cpu:2", "--drafters", "cpu:1", "--dtype", "fp32",
                       "--batches", "60", "--target-cmd", target_cmd())
    assert_intact(done, result, 60)


def test_torch_target_bf16_concatenated_feeds_the_cpp_drafter(tmp_path):
    done, result = run(tmp_path, "--targets", "cpu:1", "--drafters", "cpu:1", "--dtype", "bf16",
                       "--no-split-fc-layers", "--batches", "60",
                       "--target-cmd", target_cmd("--torch"))
    assert_intact(done, result, 60)


def test_cpp_targets_feed_a_python_drafter(tmp_path):
    done, result = run(tmp_path, "--targets", "cpu:2", "--drafters", "cpu:1", "--batches", "60",
                       "--drafter-cmd", "%s %s" % (PYTHON, os.path.join(HERE, "synthetic_drafter.py")))
    assert_intact(done, result, 60)


def test_sigkilled_python_targets_lose_and_double_nothing(tmp_path):
    # Each target's first incarnation kills itself with its 3rd batch bound and one layer
    # written; its successor must write that batch again, into the same slot.
    done, result = run(tmp_path, "--targets", "cpu:2", "--drafters", "cpu:1", "--batches", "80",
                       "--target-cmd", target_cmd("--die-after", "3"))
    assert_intact(done, result, 80)
    assert result["restarts_target"] == 2
    logs = (tmp_path / "logs" / "target-0.log").read_text()
    assert "adopted 1 unpublished batch" in logs


def test_a_restarted_command_killed_before_attaching_is_a_crash_not_a_setup_error(tmp_path):
    # Its first start attached and worked, then died (SIGKILL, 3rd job); its second start is
    # SIGKILLed before attaching (the OOM killer during a model load). That is a crash: back
    # off and restart, not the run's end with exit 4.
    starts = tmp_path / "starts"
    done, result = run(tmp_path, "--targets", "cpu:1", "--drafters", "cpu:1", "--batches", "40",
                       "--target-cmd", target_cmd("--die-after", "3",
                                                  "--die-before-attach-on-start", "2",
                                                  "--starts-file", str(starts)))
    assert_intact(done, result, 40)
    assert len(starts.read_text().splitlines()) == 3
    assert result["restarts_target"] == 2
    assert "before attaching" not in done.stderr


def test_a_missing_command_is_named_with_its_log(tmp_path):
    done, _ = run(tmp_path, "--targets", "cpu:1", "--drafters", "cpu:1", "--batches", "10",
                  "--target-cmd", "no-such-program-hsring --flag")
    assert done.returncode == 4, done.stderr
    assert "target 0: its command 'no-such-program-hsring --flag' exited with 127" in done.stderr
    assert "not found" in done.stderr  # the shell's own words, from the log


def test_a_command_that_exits_at_once_is_named_with_its_log(tmp_path):
    done, _ = run(tmp_path, "--targets", "cpu:1", "--drafters", "cpu:1", "--batches", "10",
                  "--drafter-cmd", "%s -c \"import sys; print('bad config'); sys.exit(3)\"" % PYTHON)
    assert done.returncode == 4, done.stderr
    assert "drafter 0: its command" in done.stderr and "exited with 3 before attaching" in done.stderr
    assert "| bad config" in done.stderr


def test_a_command_that_never_attaches_is_stopped(tmp_path):
    done, _ = run(tmp_path, "--targets", "cpu:1", "--drafters", "cpu:1", "--batches", "10",
                  "--attach-timeout", "1", "--target-cmd", "echo waiting; sleep 60")
    assert done.returncode == 4, done.stderr
    assert "did not attach to ring" in done.stderr and "| waiting" in done.stderr


def status_json(ring):
    done = subprocess.run([hsring_bin(), "status", "--ring", ring, "--json", "--interval", "0.1"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_python_workers_log_profiles_and_count_their_stages_for_status(tmp_path):
    # What `hsring run --profile-interval` and `hsring status` show for hsring's own
    # workers, for a Python target and a Python drafter.
    ring = "hsring-pytest-prof-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    drafter = "%s %s" % (PYTHON, os.path.join(HERE, "synthetic_drafter.py"))
    argv = [hsring_bin(), "run", "--ring", ring, "--model", "synthetic", "--quiet",
            "--slots", "8", "--max-tokens", "64", "--hidden-size", "32", "--targets", "cpu:1",
            # 5 s: two profile lines need ~0.6 s of each worker's life after its Python
            # start-up, which took most of 2 s on a loaded 2-core machine.
            "--drafters", "cpu:1", "--seconds", "5", "--profile-interval", "0.3", "--keep-ring",
            "--log-dir", str(tmp_path / "logs"), "--target-cmd", target_cmd(),
            "--drafter-cmd", drafter]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        for role, stages in (("target", ("target.forward", "target.copy",
                                         "target.publish_wait")),
                             ("drafter", ("drafter.claim_wait", "drafter.step"))):
            log = (tmp_path / "logs" / ("%s-0.log" % role)).read_text()
            lines = [line for line in log.splitlines()
                     if line.startswith("[%s 0 epoch 1] profile 0.3 s: " % role)]
            assert len(lines) >= 2, log
            busy = [line for line in lines if "%s count=" % stages[-1] in line]
            assert busy, log
            for stage in stages:
                assert stage + " count=" in " ".join(busy), (stage, busy)
        processes = {(p["role"], p["index"]): p for p in status_json(ring)["processes"]}
        target, drafter = processes[("target", 0)], processes[("drafter", 0)]
        assert target["batches"] > 0 and drafter["batches"] > 0
        assert target["stages"]["target.forward"]["count_total"] == target["batches"]
        assert target["stages"]["target.copy"]["count_total"] == target["batches"]
        assert drafter["stages"]["drafter.step"]["count_total"] == drafter["batches"]
    finally:
        subprocess.run([hsring_bin(), "ring", "remove", "--force", ring], capture_output=True)


def test_a_bad_profile_interval_is_refused_before_the_worker_starts(make_ring, monkeypatch):
    import hsring
    ring = make_ring()
    monkeypatch.setenv("HSRING_PROFILE_INTERVAL", "soon")
    try:
        hsring.Producer(ring.name, 0)
        assert False, "opened"
    except ValueError as e:
        assert "HSRING_PROFILE_INTERVAL 'soon' is not a profile interval" in str(e)
    monkeypatch.setenv("HSRING_PROFILE_INTERVAL", "0")
    monkeypatch.setenv("HSRING_GPU", "3")
    with hsring.Producer(ring.name, 0) as producer:
        assert producer.epoch == 1  # the refused start opened no epoch
        target = status_json(ring.name)["processes"][0]
        assert (target["role"], target["gpu"], target["epoch"]) == ("target", 3, 1)
