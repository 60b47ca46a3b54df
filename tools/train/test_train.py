"""Self-check of train.py's resume and balancing options (hand-computed cases):

  /usr/bin/python3 tools/train/test_train.py
"""
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import Config, SparseMoe  # noqa: E402
from train import get_args, given_options, resume_args  # noqa: E402


def test_resume_takes_only_written_options():
    assert given_options(["--out", "x", "--threads", "2"]) == {"out", "threads"}
    assert given_options(["--capacity=0", "--max-steps", "9"]) == {"capacity_factor", "max_steps"}  # abbreviated
    stored = vars(get_args(["--capacity-factor", "0", "--threads", "1"]))
    stored["given"] = ["threads"]  # written by stop-32 checkpoints; dropped
    argv = ["--threads", "2", "--cooldown-start", "100"]
    a = resume_args(stored, vars(get_args(argv)), given_options(argv))
    assert a.capacity_factor == 0 and a.threads == 2 and a.cooldown_start == 100
    assert not hasattr(a, "given")


def test_bad_values_are_refused():
    for bad in (["--capacity-factor", "-1"], ["--balance-window", "0"]):
        r = subprocess.run([sys.executable, os.path.join(HERE, "train.py"), *bad], capture_output=True, text=True)
        assert r.returncode == 2 and "must be" in r.stderr, r.stderr


def test_balance_window_counts_earlier_steps():
    # 2 experts, top-1, 2 tokens both routed to expert 0: this batch alone f = (1, 0);
    # with earlier counts (0, 6) f = (2, 6) / 8. Router weights zero: P = (1/2, 1/2),
    # so lb = E * sum f P = 2 * (f0 + f1) / 2 = 1 either way, and the gradient tells them apart.
    c = Config(hidden_size=4, intermediate_size=2, num_hidden_layers=1, num_experts=2, num_experts_per_tok=1)
    moe = SparseMoe(c)
    torch.nn.init.zeros_(moe.gate.weight)
    torch.nn.init.normal_(moe.w_gate_up)
    torch.nn.init.normal_(moe.w_down)
    x = torch.ones(1, 2, 4)
    grads = []
    for prior in (None, torch.tensor([0.0, 6.0])):
        moe.gate.weight.grad = None
        moe.balance_prior = prior
        _, (lb, _) = moe(x, mode="dropless")
        assert abs(lb.item() - 1.0) < 1e-6
        lb.backward()
        grads.append(moe.gate.weight.grad[:, 0].clone())
    # d lb / d logit_e = E * P_e * (f_e - sum f P) summed over tokens' mean; input 1 per column:
    # alone f=(1,0): (2*.5*(1-.5), 2*.5*(0-.5)) = (.5, -.5); window f=(.25,.75): (-.25, .25).
    assert torch.allclose(grads[0], torch.tensor([0.5, -0.5]), atol=1e-6), grads[0]
    assert torch.allclose(grads[1], torch.tensor([-0.25, 0.25]), atol=1e-6), grads[1]


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
            print("ok", name)
