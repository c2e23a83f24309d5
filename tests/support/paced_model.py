"""Model factories for end-to-end tests of the real trainer (imported by its workers, which run
with the repository root on their path).

The built-in tiny GPT, paced: every forward pass waits a little, so that a job trains at a
steady few steps a second on two shared cores and a test can reclaim it between commits without
racing it, while it spends its time waiting rather than computing.
"""

from __future__ import annotations

import os
import threading

import torch

from trainer.examples import gpt

PACE_SECONDS = 0.2
# A step (of this process, counted from 1 in each attempt) at which the user's model fails.
FAIL_AT_CALL = "RELAUNCH_TEST_MODEL_FAILS_AT_CALL"
EXIT_AT_CALL = "RELAUNCH_TEST_MODEL_EXITS_AT_CALL"  # ...or ends the process with status 1
# Attempts below this number never finish building the model (a user's factory that is still
# loading weights when the machines are reclaimed): a reclaim then surely lands during start-up.
SLOW_START_BEFORE_ATTEMPT = "RELAUNCH_TEST_SLOW_START_BEFORE_ATTEMPT"
START_HOLD_SECONDS = 300.0


class Paced(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = gpt.build_model()
        self.calls = 0

    def forward(self, tokens, targets):
        self.calls += 1
        if self.calls == int(os.environ.get(FAIL_AT_CALL) or 0):
            raise RuntimeError(f"user model: shapes do not match at call {self.calls}\n  (batch 4, 64)")
        if self.calls == int(os.environ.get(EXIT_AT_CALL) or 0):
            os._exit(1)  # a user's native library ending the process, as some do on a fatal error
        threading.Event().wait(PACE_SECONDS)  # pacing the workload, not synchronising anything
        return self.inner(tokens, targets)


def build_model():
    if int(os.environ.get("RELAUNCH_ATTEMPT") or 1) < int(os.environ.get(SLOW_START_BEFORE_ATTEMPT) or 0):
        threading.Event().wait(START_HOLD_SECONDS)  # the reclaim ends this process first
    return Paced()
