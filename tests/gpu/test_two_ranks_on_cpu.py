"""tests/gpu/nccl_two_ranks.py's own logic, on this machine's CPU (ctest hmr_gpu_scripts_on_cpu).

A GPU session has minutes of device time: a wrong expectation in the script, or a diagnosis
that says nothing, wastes one. Here, with PyTorch on the CPU and neither NCCL nor a GPU:
  - every collective's expected result, for both ranks and several warm-up variants, is what
    the collective computes from the two ranks' send buffers, and each sender's part of it
    is where `sources` says;
  - wrong_elements.describe tells apart data never written, data from the wrong offset or the
    previous iteration, and garbage, with the runs' offsets and granularity;
  - a wrong result is logged (a BAD line) and the rank goes on, and bench() then fails.
Run with Debian's interpreter: /usr/bin/python3 -m pytest tests/gpu/test_two_ranks_on_cpu.py
"""
import json
import os
import sys
import types

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nccl_two_ranks as ntr  # noqa: E402
import wrong_elements as we  # noqa: E402


def cpu_rank(r):
    """A Rank with what setup() and check_result() use, on the CPU, without NCCL."""
    rank = object.__new__(ntr.Rank)
    rank.torch = torch
    rank.rank = r
    rank.peer = 1 - r
    rank.device = torch.device("cpu")
    rank.nccl = types.SimpleNamespace(lib=None)
    rank.comm = None
    rank.problems = []
    return rank


def computed(name, sends, r):
    """What the collective leaves in rank r's receive buffer."""
    if name == "all_reduce":
        return sends[0] + sends[1]
    if name == "all_gather":
        return torch.cat([sends[0], sends[1]])
    if name == "reduce_scatter":
        total = sends[0] + sends[1]
        half = total.numel() // 2
        return total[r * half:(r + 1) * half]
    if name == "broadcast":
        return sends[0]
    if name == "sendrecv":
        return sends[1 - r]
    raise ValueError(name)


@pytest.mark.parametrize("name", ntr.COLLECTIVES)
@pytest.mark.parametrize("size", [8, 4096, 65540, 1 << 20])
def test_expected_results_are_what_the_collectives_compute(name, size):
    ranks = [cpu_rank(0), cpu_rank(1)]
    for variant in range(3):
        built = [rank.setup(name, size, variant=variant) for rank in ranks]
        sends = [b[0] for b in built]
        for r, (send, recv, expected, launch, sources) in enumerate(built):
            assert recv.numel() == expected.numel()
            assert torch.equal(computed(name, sends, r), expected), (name, size, variant, r)
            # Each source's part of the result is its pattern from index 0.
            starts = [start for _, _, start in sources] + [expected.numel()]
            for (label, salt, start), end in zip(sources, sorted(starts)[1:]):
                if start < expected.numel() and "own" not in label:
                    part = expected[start:end]
                    assert torch.equal(part, we.pattern_values(torch, part.numel(), salt)), label
        # Another variant sends other bytes (stale data from the one before shows).
        if variant > 0:
            assert not torch.equal(built[0][2], previous_expected)
        previous_expected = built[0][2]


def gathered(half=8192, variant=0):
    """An all_gather's result as nccl_two_ranks.py expects it, and its sources."""
    s0, s1 = we.salt_of(0, 2, variant), we.salt_of(1, 2, variant)
    expected = torch.cat([we.pattern_values(torch, half, s0), we.pattern_values(torch, half, s1)])
    return expected, [("rank 0", s0, 0), ("rank 1", s1, half)], half


def test_a_right_result_says_so():
    expected, sources, _ = gathered()
    d = we.describe(torch, expected.clone(), expected, sources)
    assert d == {"wrong": 0, "of": expected.numel()}
    assert we.summary(d) == "all right"


def test_elements_never_written_are_counted_with_their_runs_and_granularity():
    expected, sources, _ = gathered()
    found = expected.clone()
    found[1024:1056] = we.FILL       # 128 B at byte 4096
    found[4096:4160] = we.FILL       # 256 B at byte 16384
    d = we.describe(torch, found, expected, sources)
    assert d["wrong"] == 96 and d["never_written"] == 96 and d["other_values"] == 0
    assert d["runs"] == 2
    assert d["first_runs_bytes"] == [[4096, 128], [16384, 256]]
    assert d["granularity_bytes"] == 128
    assert "96 never written" in we.summary(d)


def test_data_from_the_wrong_offset_names_its_sender_and_shift():
    expected, sources, _ = gathered()
    found = expected.clone()
    # Rank 0's elements 300 before where they belong (a slot written at the wrong place).
    found[2048:4096] = we.pattern_values(torch, 4096, sources[0][1])[2048 - 300:4096 - 300]
    d = we.describe(torch, found, expected, sources)
    best = d["likeliest_sources"][0]
    assert best["source"] == "rank 0" and best["shift_elements_mod_period"] == -300
    assert best["elements"] == d["wrong"]
    # Read as rank 1's, the same values give shifts that change with the index.
    assert d["likeliest_sources"][1]["source"] == "rank 1"
    assert d["likeliest_sources"][1]["elements"] < d["wrong"] // 10
    assert "rank 0 shifted by -300 elements" in we.summary(d)


def test_data_of_the_previous_iteration_is_named_as_such():
    before, sources_before, half = gathered(variant=0)
    now, current, _ = gathered(variant=1)
    found = now.clone()
    # What rank 1 sent the iteration before, left in a staging slot and copied out again.
    found[half + 100:half + 612] = before[half + 100:half + 612]
    previous = [(label + ", previous iteration", salt, start)
                for label, salt, start in sources_before]
    d = we.describe(torch, found, now, current + previous)
    best = d["likeliest_sources"][0]
    assert best["source"] == "rank 1, previous iteration"
    assert best["shift_elements_mod_period"] == 0 and best["elements"] == 512


def test_every_sender_and_variant_has_its_own_invertible_multiplier():
    seen = set()
    for sender in range(2):
        for variant in range(3):
            for case in (1, 2, 3, 4, 5, 9, 11):
                m = we.multiplier(we.salt_of(sender, case, variant))
                assert 0 < m < we.PERIOD and m * pow(m, -1, we.PERIOD) % we.PERIOD == 1
                seen.add((sender, variant, m))
    assert len({m for _, _, m in seen}) == 6  # one per (sender, variant)


def test_garbage_is_neither_unwritten_nor_a_pattern():
    expected, sources, _ = gathered()
    found = expected.clone()
    found[5:7] = 0.5
    found[9] = 1e9
    d = we.describe(torch, found, expected, sources)
    assert d["wrong"] == 3 and d["other_values"] == 3 and d["never_written"] == 0


def test_a_wrong_result_is_logged_and_the_rank_goes_on(capsys):
    rank = cpu_rank(1)
    send, recv, expected, launch, sources = rank.setup("all_gather", 1 << 16, variant=1)
    recv.copy_(expected)
    recv[100:200] = we.FILL
    assert rank.check_result("all_gather", 1 << 16, "warm-up 2 of 2", recv, expected, sources,
                             [("rank 0", we.salt_of(0, 2, 0), 0)]) is False
    assert rank.check_result("all_gather", 1 << 16, "timed", expected.clone(), expected,
                             sources) is True
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("BAD ")]
    assert len(lines) == 1
    bad = json.loads(lines[0][4:])
    assert bad["rank"] == 1 and bad["collective"] == "all_gather" and bad["never_written"] == 100
    assert bad["when"] == "warm-up 2 of 2" and "100 never written" in bad["text"]
    assert rank.problems == [bad["text"]]


def fake_pair(tmp_path, launched, bad_for):
    """launch_pair's stand-in: writes both ranks' logs as a run would, and records the call."""
    def launch_pair(args, phase, transport, extra=None, tag=None, only=None):
        tag = tag or f"{phase}-{transport}"
        launched.append({"transport": transport, "extra": extra or {}, "tag": tag,
                         "only": only})
        net = "hmr" if transport.startswith("hmr") else "Socket"
        for r in range(2):
            lines = [f"NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/{net}/0",
                     "NCCL INFO NET/Plugin: Loaded net plugin hmr (v11)",
                     f"NCCL INFO Using network {net}"]
            wrong = transport in bad_for and r == 1
            for collective in ("all_reduce", "all_gather"):
                record = {"rank": r, "collective": collective, "bytes": 1024, "us": 10.0 + r,
                          "busbw_GBps": 1.0, "verified": not (wrong and collective == "all_gather")}
                lines.append("RES " + json.dumps(record))
            if wrong:
                lines.append("BAD " + json.dumps({"rank": r, "collective": "all_gather",
                                                  "bytes": 1024, "text": "3 of 256 elements wrong"}))
                if extra and extra.get("HMR_NCCL_CHECK_LANDED") == "1":
                    lines.append("NCCL WARN NET/hmr: HMR_NCCL_CHECK_LANDED: a receive into 0x1 "
                                 "(tag 0) was reported done, and then ...")
            if extra and extra.get("HMR_NCCL_CHECK_LANDED") == "1":
                # Rank 0 sent three messages; rank 1 received the first as sent, the second
                # otherwise, and one nobody logged sending.
                key = "host:1:2 [0] NCCL INFO NET/hmr: HMR_NCCL_CHECK_SUM {} nonce=00000000000000aa tag={} ordinal={} bytes={} sum={}"
                if r == 0:
                    lines += [key.format("sent", 0, 0, 1024, "0123"), key.format("sent", 0, 1, 1024, "4567"),
                              key.format("sent", 0, 2, 8, "89ab")]
                else:
                    lines += [key.format("received", 0, 0, 1024, "0123"),
                              key.format("received", 0, 1, 1024, "ffff"),
                              key.format("received", 1, 0, 8, "0000")]
            (tmp_path / f"{tag}-rank{r}.log").write_text("\n".join(lines) + "\n")
        return [], tag
    return launch_pair


def test_the_bench_keeps_wrong_results_out_of_its_table_and_reruns_them_checked(
        tmp_path, monkeypatch, capsys):
    launched = []
    monkeypatch.setattr(ntr, "launch_pair", fake_pair(tmp_path, launched, {"hmr-shm"}))
    monkeypatch.setattr(ntr, "wait_pair", lambda procs, limit: [0, 0])
    args = types.SimpleNamespace(out=str(tmp_path), quick=False, transports="hmr-tcp,hmr-shm",
                                 started=ntr.time.time(), budget=1000, pair_limit=1)
    failures = []
    ntr.bench_phase(args, failures)
    out = capsys.readouterr().out
    assert "rank 1 BAD: 3 of 256 elements wrong" in out
    # The rerun: the plugin's transport that went wrong, only what went wrong, checked.
    assert [c["transport"] for c in launched] == ["hmr-tcp", "hmr-shm", "hmr-shm"]
    rerun = launched[-1]
    assert rerun["extra"] == {"HMR_NCCL_CHECK_LANDED": "1"}
    assert rerun["only"] == {"sizes": "1024", "collectives": "all_gather"}
    assert "rank 1: 1 receives whose bytes changed after they were reported done" in out
    assert ("1 agree, 1 differ (corrupted between the two), 1 sent only, 1 received only"
            in out)
    assert ("nonce=00000000000000aa tag=0 ordinal=1: sent 1024 B sum 4567, received 1024 B "
            "sum ffff") in out
    # The table holds verified results only: hmr-shm's all_gather is not in it.
    table = (tmp_path / "nccl_two_ranks.md").read_text()
    gather = [row for row in table.splitlines() if row.startswith("| all_gather | 1 KiB")]
    reduce = [row for row in table.splitlines() if row.startswith("| all_reduce | 1 KiB")]
    assert gather and reduce
    assert gather[0].split(" | ")[4] == "-"       # hmr shm µs: none
    assert reduce[0].split(" | ")[4] == "11.0"    # (the slower rank's)
