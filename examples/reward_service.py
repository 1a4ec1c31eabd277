#!/usr/bin/env python3
"""reward_service.py - a baton reward service in Python: scores the completions of the built-in
arithmetic task exactly as baton's own verifier does (bt_source_reward in data/source.c), so a run
that uses it writes the same metrics as a run without it.  Copy it and change score() to score
anything.  The protocol (one JSON request per batch over ZeroMQ REQ/REP) is in docs/protocol.md,
"Reward service".

    python3 examples/reward_service.py tcp://127.0.0.1:5601 [--delay-ms N] [--format-reward X]
    baton run configs/arith.json --set reward.service=tcp://127.0.0.1:5601

Needs pyzmq (Debian: python3-zmq).  Serves until killed (SIGINT or SIGTERM).
"""
import argparse
import json
import sys
import time

import zmq

SPACE = " \t\n\v\f\r"  # what C's isspace() trims in the "C" locale, and nothing else
DIGITS = "0123456789"  # ASCII digits only, as C's isdigit()


def score(answer, completion, format_reward):
    """(reward, correct) of one completion, as baton scores the arithmetic task: after leading
    white space, an optional '-' and digits; correct when that text equals the answer exactly
    ("085" is not "85"); well formed when nothing but white space follows it.  The reward is 1 when
    correct, plus format_reward when well formed."""
    text = completion.strip(SPACE)
    start = 1 if text.startswith("-") else 0
    stop = start
    while stop < len(text) and text[stop] in DIGITS:
        stop += 1
    found = stop > start
    correct = found and text[:stop] == answer
    well_formed = found and stop == len(text)
    return (1.0 if correct else 0.0) + (format_reward if well_formed else 0.0), correct


def handle(request, format_reward):
    """The reply to one decoded request: rewards and correct flags in item order, or an error."""
    if not isinstance(request, dict) or request.get("version") != 1:
        return {"error": "expected a request object with \"version\": 1"}
    items = request.get("items")
    if not isinstance(items, list):
        return {"error": "expected \"items\": an array"}
    rewards, correct = [], []
    for item in items:
        reward, right = score(item["answer"], item["completion"], format_reward)
        rewards.append(reward)
        correct.append(right)
    return {"rewards": rewards, "correct": correct}


def main():
    parser = argparse.ArgumentParser(description="A baton reward service for the arithmetic task.")
    parser.add_argument("endpoint", help="where to bind: tcp://HOST:PORT or ipc://PATH")
    parser.add_argument("--delay-ms", type=float, default=0.0,
                        help="sleep this long before each reply, as a slow scorer would")
    parser.add_argument("--format-reward", type=float, default=0.0,
                        help="the run's task.format_reward (default 0)")
    args = parser.parse_args()
    socket = zmq.Context.instance().socket(zmq.REP)
    socket.bind(args.endpoint)
    print(f"reward service: listening on {args.endpoint}", file=sys.stderr, flush=True)
    try:
        while True:
            message = socket.recv()
            try:  # a bad request gets an error reply; it never ends the service
                reply = handle(json.loads(message), args.format_reward)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                reply = {"error": f"bad request: {type(e).__name__}: {e}"}
            if args.delay_ms > 0:
                time.sleep(args.delay_ms / 1000.0)
            socket.send(json.dumps(reply).encode())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
