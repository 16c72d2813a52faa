#!/usr/bin/env python3
"""tools/cuda_trace.py: read the wait trace of a CUDA run (a build configured with
-DMLXCEL_CUDA_TRACE=ON, run with MLXCEL_CUDA_TRACE=FILE) and print where a step's time goes.

    python3 tools/cuda_trace.py FILE [--steps N] [--gap US] [--split US] [--labels FILE] [--kernels N]

Every block that waits for its predecessor (pdl_wait) recorded its grid, the time
it reached the wait (t0) and the time the wait let it go (t1). A grid id is one launch, except in a
graph, whose replays launch each node with the same id: a grid's records are cut into launches
where, in the order of t1, one comes more than --split us (default 100) after the one before.
Per kernel (launch): `start`, its
first block at the wait; `go`, its first block let go (the kernel before it done and its writes
visible); `spread`, from the first block let go to the last; `lead`, go - start (how long it had
been resident, copying weights or waiting, before it could go on); `load` (files of the second
form, MXTRACE2), the mean over its blocks of the time an L2 load issued as the wait let go took to
come back (what the kernel's first loads wait for, e.g. behind the weight copies a block issued
before its wait). The kernels are ordered by
`go`; a step is a run of kernels whose next one starts (its first block at the wait) more than
--gap us after the one before let its last block go, the host's part between replays (without
--gap: of 8, 50 and 200, the one whose most common step is the longest, seen 3 times at least, the
smaller on a tie: long kernels that hold the next one's blocks off the multiprocessors until they end,
as dense bf16 products do, leave gaps of tens of us inside a step). --kernels N: the steps of N
kernels are the ones read, whatever length is most common (and without --gap, the gap that gives
most of them): a run with a prompt test before its decode steps (`-p 512`) leaves many short
groups of prefill kernels that outnumber them.
Per step: its kernels and its span (first go to the next step's first go). For the last --steps
steps (default 3) of the most common length (or of --kernels), per kernel position: `next`, the time from its go to
the next kernel's go (the critical path, kernel by kernel), averaged, and the blocks; --labels
FILE names the positions (one label a line, in launch order, e.g. from MLXCEL_CUDA_PROFILE's
order). Kernels that never wait (cuBLAS, ones without PDL) are not in the trace.
"""
import struct
import sys
from collections import Counter, defaultdict


def load(path):
    try:
        return read(path)
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}")


def read(path):
    """the records as (grid, t0, t1, t2, sm, block); t2 = t1 in the first form, which has none"""
    with open(path, "rb") as f:
        head = f.read(16)
        if len(head) < 16 or head[:8] not in (b"MXTRACE1", b"MXTRACE2"):
            sys.exit(f"{path}: not a trace file (no MXTRACE1 or MXTRACE2 header)")
        v2 = head[:8] == b"MXTRACE2"
        size = 40 if v2 else 32
        (n,) = struct.unpack("<Q", head[8:])
        data = f.read(size * n)
        if len(data) < size * n:
            sys.exit(f"{path}: {n} records announced, {len(data) // size} present")
    if v2:
        return [struct.unpack_from("<QQQQII", data, 40 * i) for i in range(n)]
    return [(g, t0, t1, t1, sm, b) for g, t0, t1, sm, b in (struct.unpack_from("<QQQII", data, 32 * i) for i in range(n))]


def launches(rs, split_ns):
    """one grid's records (t0, t1, t2, block) cut into launches at gaps in t1 over split_ns"""
    rs = sorted(rs, key=lambda r: r[1])
    cur = [rs[0]]
    for r in rs[1:]:
        if r[1] - cur[-1][1] > split_ns:
            yield cur
            cur = []
        cur.append(r)
    yield cur


def kernels(recs, split_ns):
    by = defaultdict(list)
    for grid, t0, t1, t2, sm, blk in recs:
        by[grid].append((t0, t1, t2, blk))
    ks = []
    for grid, rs in by.items():
        for run in launches(rs, split_ns):
            ks.append({"grid": grid, "start": min(r[0] for r in run), "go": run[0][1], "last": run[-1][1],
                       "load": sum(r[2] - r[1] for r in run) / len(run), "blocks": len({r[3] for r in run})})
    ks.sort(key=lambda k: k["go"])
    return ks


def steps_of(ks, gap_ns):
    steps, cur = [], []
    for k in ks:
        if cur and k["start"] > max(c["last"] for c in cur[-4:]) + gap_ns:
            steps.append(cur)
            cur = []
        cur.append(k)
    if cur:
        steps.append(cur)
    return steps


def main(argv):
    args = argv[1:]
    opts = {"--steps": "3", "--gap": "", "--split": "100", "--labels": "", "--kernels": ""}
    path = None
    i = 0
    while i < len(args):
        if args[i] in opts and i + 1 < len(args):
            opts[args[i]] = args[i + 1]
            i += 2
        elif args[i].startswith("-"):
            sys.exit(__doc__)
        else:
            path = args[i]
            i += 1
    if not path:
        sys.exit(__doc__)
    try:
        nsteps, split = int(opts["--steps"]), float(opts["--split"]) * 1000
        gaps = [float(opts["--gap"]) * 1000] if opts["--gap"] else [8000.0, 50000.0, 200000.0]
        want = int(opts["--kernels"]) if opts["--kernels"] else None
    except ValueError:
        sys.exit(f"--steps and --kernels take a whole number, --gap and --split a number of us "
                 f"(got {opts['--steps']!r}, {opts['--kernels']!r}, {opts['--gap']!r}, {opts['--split']!r})")
    if nsteps < 1 or not all(g > 0 for g in gaps) or not split > 0 or (want is not None and want < 1):
        sys.exit("--steps, --kernels, --gap and --split must be positive")
    try:
        labels = [l.rstrip("\n") for l in open(opts["--labels"])] if opts["--labels"] else []
    except OSError as e:
        sys.exit(f"{opts['--labels']}: {e.strerror}")
    recs = load(path)
    ks = kernels(recs, split)
    if not ks:
        sys.exit(f"{path}: no records")
    best = None
    for g in gaps:
        st = steps_of(ks, g)
        n, cnt = Counter(len(s) for s in st).most_common(1)[0]
        key = (cnt >= 3 or len(gaps) == 1, n) if want is None else (sum(len(s) == want for s in st), -g)
        if best is None or key > best[0]:
            best = (key, g, st)
    _, gap, steps = best
    print(f"{len(recs)} records, {len(ks)} kernels, {len(steps)} steps (a new step where a kernel starts "
          f">{gap / 1000:g} us after the one before let its last block go)")
    lens = Counter(len(s) for s in steps)
    common, count = lens.most_common(1)[0]
    print(f"kernels a step: {dict(sorted(lens.items()))}; the most common, {common}, {count} steps")
    if want is not None:
        common = want
        print(f"read: the steps of {want} kernels ({lens.get(want, 0)})")
    sel = [j for j, s in enumerate(steps) if len(s) == common and j + 1 < len(steps)][-nsteps:]
    if not sel:
        sys.exit("no complete step of that length with a step after it")
    spans = [(steps[j + 1][0]["go"] - steps[j][0]["go"]) / 1000 for j in sel]
    inside = [(steps[j][-1]["last"] - steps[j][0]["go"]) / 1000 for j in sel]
    print(f"the last {len(sel)}: step span (first go to the next step's) " + ", ".join(f"{v:.1f}" for v in spans) +
          " us; first go to last kernel's last block let go " + ", ".join(f"{v:.1f}" for v in inside) + " us")
    rows = []
    for p in range(common):
        nxt, lead, spread, lds, blocks = [], [], [], [], set()
        for j in sel:
            s = steps[j]
            k = s[p]
            after = s[p + 1]["go"] if p + 1 < len(s) else steps[j + 1][0]["go"]
            nxt.append((after - k["go"]) / 1000)
            lead.append((k["go"] - k["start"]) / 1000)
            spread.append((k["last"] - k["go"]) / 1000)
            lds.append(k["load"] / 1000)
            blocks.add(k["blocks"])
        rows.append((p, sum(nxt) / len(nxt), sum(lead) / len(lead), sum(spread) / len(spread), sorted(blocks),
                     sum(lds) / len(lds)))
    print(f"{'#':>4} {'next':>8} {'lead':>8} {'spread':>8} {'blocks':>8} {'load':>8}  label (us, averaged over those steps)")
    for p, nx, ld, sp, bl, lo in rows:
        lab = labels[p] if p < len(labels) else ""
        print(f"{p:4d} {nx:8.2f} {ld:8.2f} {sp:8.2f} {'/'.join(map(str, bl)):>8} {lo:8.2f}  {lab}")
    # the same summed by block count (a proxy for the kind of kernel when there are no labels)
    by = defaultdict(lambda: [0, 0.0])
    for p, nx, ld, sp, bl, lo in rows:
        key = labels[p] if p < len(labels) else f"{'/'.join(map(str, bl))} blocks"
        by[key][0] += 1
        by[key][1] += nx
    print("by kind: " + "; ".join(f"{k}: {n} x {t / n:.2f} = {t:.1f} us" for k, (n, t) in
                                  sorted(by.items(), key=lambda kv: -kv[1][1])))


if __name__ == "__main__":
    main(sys.argv)
