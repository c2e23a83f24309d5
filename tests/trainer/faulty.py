"""Factories for failure tests (imported by the workers through PYTHONPATH)."""

import torch

from trainer.examples import gpt


class FailsAtThirdStep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = gpt.build_model()
        self.calls = 0

    def forward(self, tokens, targets):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("synthetic failure in the model")
        return self.inner(tokens, targets)


def build_failing_model():
    return FailsAtThirdStep()
