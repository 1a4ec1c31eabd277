#!/usr/bin/env python3
"""reward_service.py - a baton reward service written with baton_reward (python/, installed with
`pip install ./python`, or found beside this checkout): scores the built-in arithmetic task exactly
as baton's own verifier does (bt_source_reward in data/source.c), so a run that uses it writes the
same metrics as a run without it.  Copy it and change the functions to score anything.

    python3 examples/reward_service.py tcp://127.0.0.1:5601 [--delay-ms N] [--format-reward X]
    baton run configs/arith.json --set reward.service=tcp://127.0.0.1:5601

Needs pyzmq (Debian: python3-zmq).  Serves until killed (SIGINT or SIGTERM).
"""
import argparse
import os
import sys
import time

try:
    import baton_reward
except ImportError:  # not installed: the package of this checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import baton_reward

SPACE = " \t\n\v\f\r"  # what C's isspace() trims in the "C" locale, and nothing else
DIGITS = "0123456789"  # ASCII digits only, as C's isdigit()


def parse(answer, completion):
    """(correct, well_formed) as baton reads an arithmetic completion: after leading white space,
    an optional '-' and digits; correct when that text equals the answer exactly ("085" is not
    "85"); well formed when nothing but white space follows it."""
    text = completion.strip(SPACE)
    start = 1 if text.startswith("-") else 0
    stop = start
    while stop < len(text) and text[stop] in DIGITS:
        stop += 1
    found = stop > start
    return found and text[:stop] == answer, found and stop == len(text)


def main():
    parser = argparse.ArgumentParser(description="A baton reward service for the arithmetic task.")
    parser.add_argument("endpoint", help="where to bind: tcp://HOST:PORT or ipc://PATH")
    parser.add_argument("--delay-ms", type=float, default=0.0,
                        help="sleep this long before each batch's reply, as a slow scorer would")
    parser.add_argument("--format-reward", type=float, default=0.0,
                        help="the run's task.format_reward (default 0)")
    args = parser.parse_args()

    def correct(prompts, completions, answers, **columns):
        return [parse(a, c)[0] for a, c in zip(answers, completions)]

    def well_formed(prompts, completions, answers, **columns):
        time.sleep(args.delay_ms / 1000.0)
        return [1.0 if parse(a, c)[1] else 0.0 for a, c in zip(answers, completions)]

    def is_correct(prompts, completions, answers, **columns):
        return [1.0 if right else 0.0 for right in correct(prompts, completions, answers)]

    # reward = 1 when correct, plus format_reward when well formed
    baton_reward.serve([is_correct, well_formed], args.endpoint,
                       weights=[1.0, args.format_reward], correct=correct)


if __name__ == "__main__":
    main()
