"""The number-guessing game of env_guess.py, served with baton_reward.env, that logs what it is asked
and kills a process of the run in the middle of an episode (tests/test_episode_faults.c).

Every request's items go to LOG, one line each, flushed at once: "reset PID EPISODE" or
"step PID EPISODE", PID the process that sent the request (the ipc:// peer's pid, which libzmq
reads with SO_PEERCRED and gives as the frame's "Peer-Address" property).  With KILL =
"N:self:WORD" the sender of the Nth step request from a process whose command line has a word
starting with WORD ("rollout": a `baton worker` of `baton run --procs`; "run": `baton run`
itself, workers and all) is killed with SIGKILL as that request arrives, while its episodes wait
on the answer; "N:parent:WORD" kills the sender's parent instead (under --procs: the controller).
"N:self:WORD:GATE" holds that request (logging "held PID") until the file GATE exists, then kills:
the test lets the run go on elsewhere (a checkpoint written) while the episode waits.  A line
"kill PID" is logged before the signal is sent.

A turn without a guess (the tiny model of the test never writes one) is rewarded 0.125 per digit
of its text times its number in the episode (1, 2, 3), so the run's advantages are not all zero;
that depends on the episode's own turns alone, as every answer of the game does, and an episode
whose reset did not start it over (its turns counted on from the lost attempt) is rewarded
otherwise.  The ids of a turn are not checked against its text (the run's tokenizer
is not bytes).  Run as: env_faults.py ENDPOINT LOG [KILL]."""
import json
import os
import signal
import sys
import time

import baton_reward.env as env_module
from baton_reward.env import serve_env

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from env_guess import Guess  # noqa: E402


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def _parent(pid):
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


class _Faults:
    def __init__(self, log, kill):
        self.log = open(log, "a", encoding="ascii")
        self.pid = 0  # the sender of the request being answered
        self.steps = 0  # step requests of rollout workers so far
        at, whom, word, *gate = kill.split(":") if kill else ("0", "", "")
        self.at, self.whom, self.word = int(at), whom, word.encode("ascii")
        self.gate = gate[0] if gate else None

    def line(self, text):
        self.log.write(text + "\n")
        self.log.flush()

    def requests(self, sock):
        """baton_reward's _requests, reading each sender's pid first."""
        while True:
            frames = sock.recv_multipart(copy=False)
            try:
                self.pid = int(frames[-1].get("Peer-Address").rsplit(":", 1)[1])
            except (ValueError, IndexError, AttributeError):
                self.pid = 0
            frames = [f.bytes for f in frames]
            if b"" not in frames:
                continue
            cut = frames.index(b"") + 1
            self.check_kill(frames[cut:])
            yield frames[:cut], frames[cut:]

    def check_kill(self, body):
        try:
            kind = json.loads(body[0]).get("kind") if len(body) == 1 else None
        except ValueError:
            kind = None
        named = any(w.startswith(self.word) for w in _cmdline(self.pid))
        if kind != "step" or not named or self.at <= 0:
            return
        self.steps += 1
        if self.steps == self.at:
            victim = self.pid if self.whom == "self" else _parent(self.pid)
            if self.gate:
                self.line(f"held {self.pid}")
                while not os.path.exists(self.gate):
                    time.sleep(0.005)
            self.line(f"kill {victim}")
            os.kill(victim, signal.SIGKILL)


class Logged(Guess):
    faults = None

    def reset(self):
        Logged.faults.line(f"reset {Logged.faults.pid} {self.episode}")
        return super().reset()

    def step(self, action_text, action_ids):
        Logged.faults.line(f"step {Logged.faults.pid} {self.episode}")
        self.played = getattr(self, "played", 0) + 1
        obs, reward, done, info = super().step(action_text, list(action_text.encode("utf-8")))
        if obs == "no guess":
            reward = 0.125 * self.played * sum(c.isdigit() for c in action_text)
        return obs, reward, done, info


def make_env(prompt, answer, **columns):
    """Guess's object for the episode, told its id (serve_env's _reset reads it from the item)."""
    env = Logged(prompt, answer, **columns)
    env.episode = _current_episode[0]
    return env


_current_episode = [None]
_reset_items = env_module._reset


def _reset(make, episodes, items):
    out = []
    for item in items:  # one at a time, so make_env knows which episode it makes
        _current_episode[0] = item.get("episode") if isinstance(item, dict) else None
        out += _reset_items(make, episodes, [item])
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    Logged.faults = _Faults(args[1], args[2] if len(args) > 2 else "")
    env_module._requests = Logged.faults.requests
    env_module._reset = _reset
    serve_env(make_env, args[0], stop=["</guess>"])
