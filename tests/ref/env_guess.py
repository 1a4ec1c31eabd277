"""A number-guessing environment served with baton_reward.env (tests/test_env_service.c).

The prompt's answer is the number; the columns "low" and "high" bound it.  Each model turn is a
guess, "<guess>N</guess>", answered "higher", "lower" or "correct in T guesses" (reward 1, done);
a wrong guess costs 0.125.  A turn without a guess is answered "no guess" (tool_error).  A range
of one number is over at reset ("only N", done).  A turn whose text holds "slow" is answered after
0.6 s (the client's resend meets the reply already given).  The token ids of a turn must be its
text's bytes (the test sends them so).  Run as: env_guess.py ENDPOINT [SECRET_KEY ALLOW]."""
import sys
import time

from baton_reward.env import serve_env


class Guess:
    def __init__(self, prompt, answer, low=1, high=100, **columns):
        self.target, self.low, self.high, self.turns = int(answer), low, high, 0

    def reset(self):
        if self.low == self.high:
            return f"only {self.low}", True
        return f"Guess a number from {self.low} to {self.high}.", False

    def step(self, action_text, action_ids):
        if action_ids != list(action_text.encode("utf-8")):
            raise ValueError("the ids are not the text's bytes")
        if "slow" in action_text:
            time.sleep(0.6)
        try:
            guess = int(action_text.split("<guess>")[1].split("</guess>")[0])
        except (IndexError, ValueError):
            return "no guess", 0.0, False, {"tool_called": False, "tool_error": True}
        self.turns += 1
        if guess == self.target:
            return f"correct in {self.turns} guesses", 1.0, True, {"tool_called": True}
        return ("higher" if guess < self.target else "lower"), -0.125, False, \
            {"tool_called": True, "tool_error": False, "guess": guess}


if __name__ == "__main__":
    args = sys.argv[1:]
    serve_env(Guess, args[0], stop=["</guess>"],
              secret_key=args[1] if len(args) > 1 else None,
              allow=args[2] if len(args) > 2 else None)
