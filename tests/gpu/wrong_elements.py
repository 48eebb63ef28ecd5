"""What is wrong in a collective's result: enough, in one log line, to tell how data went bad.

tests/gpu/nccl_two_ranks.py fills every receive buffer with FILL before a collective and sends
patterns (m * i + salt) % PERIOD, whose multiplier m is the sender's and the iteration's own
(multiplier()), so a wrong element says where it came from:
  - FILL: nothing was ever written there (the data came late, or never);
  - a pattern value: an element of some sender's pattern, though maybe the wrong one. A value
    names its index only modulo PERIOD, and every pattern has some index for every value, so
    each candidate source gets a displacement (found element = source element i + d, mod
    PERIOD) and the histogram tells: one (source, d) pair covering the wrong elements is data
    that landed at the wrong offset or came from the wrong step (a stale staging slot shows as
    the previous iteration's source, or a displacement of a slot's size mod PERIOD). Read as
    another source's, a run of one source's values gives displacements that change with the
    index (the multipliers differ), so no pair collects them; scattered pairs mean no source;
  - anything else (not an integer below PERIOD, or a sum where sums are expected): garbage.
The wrong elements' runs (consecutive indices), their byte offsets and the largest power of
two dividing every run's start and length (the granularity at which it went wrong: 128 B, a
4 KiB page, a 512 KiB NCCL slot...) complete the picture.

Works on CPU and CUDA tensors; the detail is computed on at most SAMPLE wrong elements (the
counts are always exact). Checked on the CPU by tests/gpu/test_two_ranks_on_cpu.py.
"""

PERIOD = 4093  # a prime: every multiplier below has an inverse
FILL = -1.0
SAMPLE = 1 << 22


def salt_of(sender, case, variant):
    """The salt of `sender`'s pattern for a collective (`case` < 100) in warm-up `variant`."""
    return 1000 * sender + 100 * variant + case


def multiplier(salt):
    """The pattern's multiplier: one of 20, by sender (thousands) and variant (hundreds)."""
    return 7 + 4 * ((salt // 1000) * 10 + (salt // 100) % 10)


def pattern_values(torch, count, salt, device="cpu"):
    """The pattern nccl_two_ranks.py sends: small integers, so float32 sums stay exact."""
    return ((torch.arange(count, device=device, dtype=torch.int64) * multiplier(salt) + salt)
            % PERIOD).to(torch.float32)


def _granularity(starts, lengths, element_bytes, limit=1 << 20):
    g = limit
    for value in list(starts) + list(lengths):
        b = int(value) * element_bytes
        while g > 1 and b % g != 0:
            g //= 2
    return g


def describe(torch, found, expected, sources=(), element_bytes=4, fill=FILL, first_runs=8):
    """A dict that says what is wrong in `found` against `expected` (1-D tensors).

    sources: (label, salt, start) triples: `expected[start:]` holds pattern(salt) from index 0
    (each sender's part of the result, this iteration's and the previous one's). Leave it empty
    where the result is a sum of patterns (all_reduce, reduce_scatter).
    """
    wrong_mask = found != expected
    wrong = int(wrong_mask.sum().item())
    out = {"wrong": wrong, "of": int(found.numel())}
    if wrong == 0:
        return out
    out["never_written"] = int((found[wrong_mask] == fill).sum().item())
    index = wrong_mask.nonzero().flatten()[:SAMPLE].to("cpu")
    values = found.flatten()[index.to(found.device)].to("cpu")
    out["sampled"] = int(index.numel())
    # Runs of consecutive wrong indices.
    breaks = (index[1:] - index[:-1] != 1).nonzero().flatten() + 1
    starts = torch.cat([index[:1], index[breaks]])
    ends = torch.cat([index[breaks - 1], index[-1:]]) + 1
    lengths = ends - starts
    out["runs"] = int(starts.numel())
    out["first_runs_bytes"] = [[int(s) * element_bytes, int(n) * element_bytes]
                               for s, n in zip(starts[:first_runs], lengths[:first_runs])]
    out["run_bytes_min_max"] = [int(lengths.min()) * element_bytes,
                                int(lengths.max()) * element_bytes]
    out["granularity_bytes"] = _granularity(starts.tolist(), lengths.tolist(), element_bytes)
    # Where pattern values came from.
    written = values != fill
    integral = written & (values == values.floor()) & (values >= 0) & (values < PERIOD)
    out["other_values"] = int((written & ~integral).sum().item())
    if sources:
        v = values[integral].to(torch.int64)
        at = index[integral]
        tally = []
        for label, salt, start in sources:
            inverse = pow(multiplier(salt), -1, PERIOD)
            source_index = ((v - salt) % PERIOD) * inverse % PERIOD
            shift = (source_index + start - at) % PERIOD
            shift = torch.where(shift > PERIOD // 2, shift - PERIOD, shift)
            if shift.numel() == 0:
                continue
            counts = torch.bincount(shift + PERIOD // 2, minlength=PERIOD)
            best = int(counts.argmax())
            tally.append((int(counts[best]), label, best - PERIOD // 2))
        tally.sort(reverse=True)
        out["likeliest_sources"] = [{"source": label, "shift_elements_mod_period": d,
                                     "elements": n} for n, label, d in tally[:3]]
    return out


def summary(d):
    """One line for a log or an exception."""
    if d["wrong"] == 0:
        return "all right"
    text = (f"{d['wrong']} of {d['of']} elements wrong, {d['never_written']} never written "
            f"(still {FILL}), {d['other_values']} garbage; {d['runs']} runs of "
            f"{d['run_bytes_min_max'][0]}-{d['run_bytes_min_max'][1]} B at a granularity of "
            f"{d['granularity_bytes']} B, the first at byte offsets "
            f"{[r[0] for r in d['first_runs_bytes']]}")
    if d.get("likeliest_sources"):
        best = d["likeliest_sources"][0]
        text += (f"; likeliest source: {best['source']} shifted by "
                 f"{best['shift_elements_mod_period']} elements (mod {PERIOD}) for "
                 f"{best['elements']} of them")
    if d["sampled"] < d["wrong"]:
        text += f" (detail from the first {d['sampled']})"
    return text
