#!/usr/bin/env python3
"""A competing CPU load that comes and goes: busy (spinning) for --busy-ms in every --period-ms, on one core, until
killed or for --seconds. The host's speed as the all-reduce benchmark's ranks see it then changes every few
milliseconds, as beside another job's bursts of work (docs/benchmarks.md, "automatic re-ranking online").

    python3 bench/duty_load.py --busy-ms 5 --period-ms 20 &
"""
import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy-ms", type=float, default=5.0, help="spinning time in each period (default 5)")
    parser.add_argument("--period-ms", type=float, default=20.0, help="period (default 20)")
    parser.add_argument("--seconds", type=float, default=0.0, help="stop after this long (default: run until killed)")
    args = parser.parse_args()
    if not 0 < args.busy_ms <= args.period_ms:
        parser.error(f"--busy-ms {args.busy_ms} must be above 0 and at most --period-ms {args.period_ms}")
    if args.seconds < 0:
        parser.error(f"--seconds {args.seconds} must be 0 (run until killed) or more")
    start = time.perf_counter()
    period = args.period_ms / 1e3
    busy = args.busy_ms / 1e3
    next_start = start
    while args.seconds == 0 or time.perf_counter() - start < args.seconds:
        spin_until = next_start + busy
        while time.perf_counter() < spin_until:
            pass
        next_start += period
        rest = next_start - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
        else:
            next_start = time.perf_counter()


if __name__ == "__main__":
    main()
