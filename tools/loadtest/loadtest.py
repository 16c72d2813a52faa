#!/usr/bin/env python3
"""tools/loadtest/loadtest.py: load generator for mlxcel-server (or any llama-server / OpenAI
compatible server) on this machine. For each concurrency level it runs that many clients, each
sending streaming /v1/completions requests (greedy, ignore_eos, fixed max_tokens) until its request
count or the level's time limit is reached, and reports aggregate generated tokens/s (client wall
clock) and the mean per-request decode speed the server measured (timings.predicted_per_second).

Bounded: --requests per client and --time-limit per level; loopback only (127.0.0.1, ::1,
localhost); no dependencies beyond Python 3.

  python3 tools/loadtest/loadtest.py --url http://127.0.0.1:8080 --concurrency 1,4,16,32 --json
"""
import argparse, json, sys, threading, time, http.client, urllib.parse

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def one_request(host, port, prompt, max_tokens, timeout):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.time()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    ttft, usage, timings = None, None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("choices") and ttft is None:
            ttft = time.time() - t0
        if ev.get("usage"):
            usage, timings = ev["usage"], ev.get("timings")
    c.close()
    return {"t": time.time() - t0, "ttft": ttft or 0.0, "tokens": usage["completion_tokens"] if usage else 0,
            "server_tps": (timings or {}).get("predicted_per_second", 0.0)}


def run_level(host, port, conc, args):
    results, errors = [], []
    lock = threading.Lock()
    deadline = time.time() + args.time_limit

    def client(i):
        for k in range(args.requests):
            if time.time() > deadline:
                break
            try:
                res = one_request(host, port, f"{args.prompt} (client {i}, request {k})", args.max_tokens,
                                  args.time_limit + 60)
                with lock:
                    results.append(res)
            except Exception as e:  # noqa: BLE001 - reported, not raised
                with lock:
                    errors.append(str(e))

    t0 = time.time()
    ts = [threading.Thread(target=client, args=(i,)) for i in range(conc)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - t0
    toks = sum(r["tokens"] for r in results)
    return {"concurrency": conc, "requests": len(results), "errors": len(errors), "tokens": toks,
            "wall_s": round(wall, 3), "tokens_per_s": round(toks / wall, 2) if wall > 0 else 0.0,
            "mean_ttft_s": round(sum(r["ttft"] for r in results) / max(1, len(results)), 4),
            "mean_server_decode_tps": round(sum(r["server_tps"] for r in results) / max(1, len(results)), 2),
            "first_error": errors[0] if errors else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--concurrency", default="1,4,16,32")
    ap.add_argument("--requests", type=int, default=2, help="requests per client per level (default 2)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--time-limit", type=float, default=120, help="seconds per level before clients stop (default 120)")
    ap.add_argument("--prompt", default="A wise man once said")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    u = urllib.parse.urlparse(args.url)
    if u.scheme != "http" or u.hostname not in LOOPBACK:
        sys.exit("loadtest: only http:// on loopback (127.0.0.1, ::1, localhost) is allowed")
    if not (1 <= args.requests <= 1000 and 1 <= args.max_tokens <= 4096 and 0 < args.time_limit <= 3600):
        sys.exit("loadtest: --requests 1..1000, --max-tokens 1..4096, --time-limit 0..3600")
    levels = [int(x) for x in args.concurrency.split(",")]
    if any(c < 1 or c > 256 for c in levels):
        sys.exit("loadtest: concurrency levels must be in 1..256")
    deadline = time.time() + 300                                  # wait for the model to load
    while True:
        try:
            c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        if time.time() > deadline:
            sys.exit("loadtest: the server did not become healthy")
        time.sleep(0.2)
    one_request(u.hostname, u.port or 80, args.prompt, 4, 120)   # warm up
    out = []
    for c in levels:
        r = run_level(u.hostname, u.port or 80, c, args)
        out.append(r)
        if not args.json:
            print(f"c={c:3d}  {r['tokens_per_s']:9.2f} tok/s aggregate  ({r['tokens']} tokens, {r['requests']} requests, "
                  f"{r['wall_s']:.1f} s, ttft {r['mean_ttft_s']:.3f} s, server decode {r['mean_server_decode_tps']:.2f} tok/s"
                  f"{', errors: ' + str(r['errors']) if r['errors'] else ''})", flush=True)
    if args.json:
        print(json.dumps({"url": args.url, "max_tokens": args.max_tokens, "levels": out}, indent=1))
    sys.exit(1 if any(r["errors"] for r in out) else 0)


if __name__ == "__main__":
    main()
