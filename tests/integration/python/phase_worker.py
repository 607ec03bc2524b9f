"""A worker that sits in each phase of docs/python.md's table until the test has read its record.

Run by tests/integration/python_phases.sh under `trainbox run` (no trainbox import, nothing but
hooks of torch's own): each `hold(NAME)` creates DIR/at-NAME, then waits (sleeping, the GIL
released, as a real stall does) until the test creates DIR/go-NAME (at most 30 s, so a test that
failed cannot leave it waiting). The holds, in order, and the record the test expects:
  forward          a forward pre-hook                                    0 forward
  backward         a gradient hook, inside loss.backward()               0 backward
  optimizer        an optimizer step pre-hook, inside optimizer.step()   0 optimizer
  user_code        the script's own code, in none of torch's calls       1 user_code
  checkpoint       pickling an object, inside torch.save                 1 checkpoint
  user_code_2      the script's own code again                           1 user_code
  save_in_forward  torch.save called inside a module's forward           1 checkpoint
  user_code_3      the script's own code again                           1 user_code
  forward_in_save  a module called inside torch.save (its pickling)      1 forward
save_in_forward and forward_in_save are "the innermost call wins", in both nestings. Each
record differs from the one before it, so each hold gets a record of its own (the writer writes
only when the phase changes); the test also checks it was written after the hold began.
    python phase_worker.py DIR
"""
import io
import os
import sys
import time

import torch
import torch.distributed as dist

DIR = sys.argv[1]


def hold(name):
    open(os.path.join(DIR, "at-" + name), "w").close()
    end = time.monotonic() + 30
    while not os.path.exists(os.path.join(DIR, "go-" + name)) and time.monotonic() < end:
        time.sleep(0.01)


class Pickled:
    """An object whose pickling (inside torch.save) runs `then`."""

    def __init__(self, then):
        self.then = then

    def __reduce__(self):
        self.then()
        return (int, (0,))


def save(then):
    torch.save(Pickled(then), io.BytesIO())


dist.init_process_group("gloo")  # arms the record
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.ones(2, 4)

h = model.register_forward_pre_hook(lambda m, a: hold("forward"))
out = model(x)
h.remove()
out.register_hook(lambda g: hold("backward"))
out.sum().backward()
h = optimizer.register_step_pre_hook(lambda o, a, k: hold("optimizer"))
optimizer.step()
h.remove()
hold("user_code")
save(lambda: hold("checkpoint"))
hold("user_code_2")
h = model.register_forward_pre_hook(lambda m, a: save(lambda: hold("save_in_forward")))
model(x)
h.remove()
hold("user_code_3")
inner = torch.nn.Linear(4, 1)
inner.register_forward_pre_hook(lambda m, a: hold("forward_in_save"))
save(lambda: inner(x))
dist.destroy_process_group()
