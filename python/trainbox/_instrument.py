"""Zero-code instrumentation: the phases of an unmodified PyTorch script, as heartbeats.

Installed by _boot/sitecustomize.py when `trainbox run` starts a Python worker, and only once
the script itself imports torch (an import hook; nothing here runs before that). Nothing here
changes what a call computes: results are bit for bit those of an uninstrumented run.

How. The phase is read off the training thread's Python stack, not written by wrappers: the
heartbeat's writer thread (_heartbeat.py) samples that thread every WRITE_EVERY_S (0.1 s),
walks its frames from the innermost out, and the first frame whose code is one of torch's
below names the phase. A step pays for none of it: no wrapper sits in forward, backward or
a collective (wrappers there cost 1-2 % of a 1.7 ms DDP step on 2 cores, cold caches between
torch's kernels; bench/python_instrument.sh). What a step still pays for: the optimizer's
post-step hook (the step count) and, under DDP, one gradient hook and one end-of-backward
callback (the allreduce wait). A stall lasts seconds and the thread that stalls waits with the
GIL released (a collective, a DataLoader queue, a file), so the sampler always sees where.

  step       the number of optimizer.step() calls (torch.optim's global post-step hook)
  rendezvous torch.distributed.init_process_group (the process group forming)
  data       a DataLoader: creating its iterator, or next()
  forward    an nn.Module call
  backward   torch.autograd.backward / grad (Tensor.backward goes through it)
  allreduce  torch.distributed.all_reduce, and a DDP backward once the local backward is done
             (an autograd end-of-backward callback, queued ahead of DDP's own wait for the
             gradient allreduce: what is left of backward is that wait)
  broadcast, all_gather, reduce_scatter, all_to_all, reduce, gather, scatter, send, recv,
  barrier    the other torch.distributed collectives (DDP's construction: broadcast)
  optimizer  optimizer.step()
  checkpoint torch.save / torch.load
  user_code  none of these: the script's own code
  done       the interpreter is exiting
The innermost wins: a collective inside a module's forward (SyncBatchNorm) reads allreduce.
The training thread is the one that called init_process_group (or made the first optimizer
step). A script that calls trainbox.heartbeat() itself owns the record from then on.

Start-up: nothing is written before the script calls init_process_group (or, in a script
without one, before its first optimizer step is done). From that call on the phase is
written, beginning with `rendezvous`, as `trainbox train` does. So a rank that never gets
there (stopped, or stuck in its imports) has no record while the others have one, and the
launcher names it as a start-up stall after --stall-timeout ("ranks 0, 2 wait in
rendezvous"), instead of every rank waiting silently for c10d's own timeout. Ranks that
merely import torch at different speeds are not affected unless one is later than the others
by the whole stall timeout (180 s by default).
"""
import atexit
import functools
import importlib
import inspect
import sys
import threading
import weakref

from . import _heartbeat as hb

_installed = False
_undo = []    # what uninstall() runs, newest first: every patch and hook of install()
_phases = {}  # code object -> phase (bytes): the frames the sampler looks for
_thread = [None]  # ident of the training thread (set when the record is armed)
_ddp_flags = []   # one [bool] a DDP: its local backward is done, the allreduce wait is on
_ddps = weakref.WeakSet()  # the DDPs made so far (install() again attaches to them)

_COLLECTIVES = {
    "all_reduce": "allreduce", "all_reduce_coalesced": "allreduce",
    "broadcast": "broadcast", "broadcast_object_list": "broadcast",
    "all_gather": "all_gather", "all_gather_into_tensor": "all_gather", "all_gather_object": "all_gather",
    "all_gather_coalesced": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all": "all_to_all", "all_to_all_single": "all_to_all",
    "reduce": "reduce", "gather": "gather", "gather_object": "gather",
    "scatter": "scatter", "scatter_object_list": "scatter",
    "send": "send", "recv": "recv", "send_object_list": "send", "recv_object_list": "recv",
    "barrier": "barrier", "monitored_barrier": "barrier",
}


def _code(fn):
    """The code object that runs fn's own body (under functools.wraps decorators), or None."""
    try:
        return inspect.unwrap(fn).__code__
    except (AttributeError, ValueError):
        return None


def _watch(fn, phase):
    code = _code(fn)
    if code is not None:
        _phases.setdefault(code, hb.encode_phase(phase))


def _arm():
    """From now on the record is written (hb.arm), for the thread that got here."""
    if hb._held is not None or _thread[0] is None:
        _thread[0] = threading.get_ident()
        hb.arm()


def sample():
    """The phase of the training thread now, from its stack (the heartbeat writer's sampler)."""
    frame = sys._current_frames().get(_thread[0])
    phases = _phases
    while frame is not None:
        p = phases.get(frame.f_code)
        if p is not None:
            if p is _BACKWARD and any(f[0] for f in _ddp_flags):
                return _ALLREDUCE
            return p
        frame = frame.f_back
    return _USER_CODE


_BACKWARD = hb.encode_phase("backward")
_ALLREDUCE = hb.encode_phase("allreduce")
_USER_CODE = hb.encode_phase("user_code")
_RENDEZVOUS = hb.encode_phase("rendezvous")


def _set(owner, name, value):
    """setattr, undone by uninstall() (the attribute as it was, the owner's own or inherited)."""
    own = name in vars(owner)
    old = vars(owner)[name] if own else None  # as stored (a staticmethod stays one)
    setattr(owner, name, value)
    _undo.append(lambda: setattr(owner, name, old) if own else delattr(owner, name))


def _patch_init(torch, dist):
    """init_process_group arms the record at its call: from then on a rank that has not arrived
    is a start-up stall (module docstring). Called once a job: the one wrapper kept."""
    c10d = dist.distributed_c10d
    orig = getattr(c10d, "init_process_group", None)
    if orig is None or getattr(orig, "__trainbox_wrapped__", None) is not None:
        return

    @functools.wraps(orig)
    def init_process_group(*args, **kwargs):
        if hb._held is not None:
            hb._phase = _RENDEZVOUS  # the first record
        _arm()
        return orig(*args, **kwargs)

    init_process_group.__trainbox_wrapped__ = orig
    _set(c10d, "init_process_group", init_process_group)
    if getattr(dist, "init_process_group", None) is orig:
        _set(dist, "init_process_group", init_process_group)


def _patch_ddp(torch):
    """DDP's construction (once a model) registers what shows its allreduce wait."""
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.autograd import Variable
    except Exception:
        return
    _watch(DDP.__init__, "broadcast")  # rank 0's weights to all
    _watch(DDP.forward, "forward")
    init = DDP.__init__
    if getattr(init, "__trainbox_wrapped__", None) is not None:
        return

    # The reducer runs in C++; what Python can see is a gradient landing. One parameter's
    # post-accumulate hook (not one per parameter: each costs a call from C++ per step) clears
    # the flag and queues a callback for the end of this backward; it runs before DDP's own
    # end-of-backward wait, which was queued later, once the last bucket was ready.
    def attach(ddp):
        params = [p for p in ddp.module.parameters() if p.requires_grad]
        if not params or not hasattr(params[-1], "register_post_accumulate_grad_hook"):
            return
        flag = [False]

        def local_backward_done():
            flag[0] = ddp.require_backward_grad_sync  # no_sync(): no allreduce follows

        def landed(_param):
            flag[0] = False
            Variable._execution_engine.queue_callback(local_backward_done)

        # the last parameter's gradient is among the first computed
        handle = params[-1].register_post_accumulate_grad_hook(landed)
        _ddp_flags.append(flag)
        _undo.append(handle.remove)
        _undo.append(lambda: _ddp_flags.remove(flag))

    for ddp in list(_ddps):
        attach(ddp)

    @functools.wraps(init)
    def ddp_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _ddps.add(self)
        attach(self)
        if hb._held is not None:
            _arm()  # every rank has been here (DDP's broadcast)

    ddp_init.__trainbox_wrapped__ = init
    _set(DDP, "__init__", ddp_init)


def _patch_optimizer(torch):
    opt = importlib.import_module("torch.optim.optimizer")  # torch.optim deletes the attribute
    post_hook = getattr(opt, "register_optimizer_step_post_hook", None)
    if post_hook is None:
        return
    profile = getattr(opt.Optimizer, "profile_hook_step", None)
    if profile is not None:  # the code of the wrapper every optimizer's step() runs in: the
        # wrapper's own, not unwrapped (_watch would follow its __wrapped__ to the lambda's)
        _phases.setdefault(profile(lambda *a, **k: None).__code__, hb.encode_phase("optimizer"))

    def post(_optimizer, _args, _kwargs):
        if hb._held is not None:
            _arm()
        hb._step += 1

    _undo.append(post_hook(post).remove)


def _watch_torch(torch):
    data = torch.utils.data.dataloader
    _watch(data._BaseDataLoaderIter.__next__, "data")
    _watch(data.DataLoader.__iter__, "data")
    Module = torch.nn.Module
    for name in ("_call_impl", "_wrapped_call_impl", "__call__"):
        if hasattr(Module, name):
            _watch(getattr(Module, name), "forward")
    _watch(torch.autograd.backward, "backward")
    _watch(torch.autograd.grad, "backward")
    _watch(torch.Tensor.backward, "backward")
    for owner in (torch, torch.serialization):
        _watch(getattr(owner, "save", None), "checkpoint")
        _watch(getattr(owner, "load", None), "checkpoint")
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return None
    c10d = dist.distributed_c10d
    for name, phase in _COLLECTIVES.items():
        _watch(getattr(c10d, name, None), phase)
    _watch(getattr(c10d, "init_process_group", None), "rendezvous")
    return dist


def install(torch):
    """Instruments `torch` (the module, fully imported). Idempotent; a no-op outside trainbox run."""
    global _installed
    if _installed or not hb.active():
        return
    _installed = True
    hb._phase = _USER_CODE  # the base phase
    hb.hold()  # nothing written until every rank has joined (see the module's docstring)
    dist = _watch_torch(torch)
    if dist is not None:
        _patch_init(torch, dist)
    _patch_ddp(torch)
    _patch_optimizer(torch)
    hb._sampler = sample
    _undo.append(lambda: setattr(hb, "_sampler", None))
    done = hb.encode_phase("done")

    def exiting():
        hb.own(hb._step, done, mine=False)

    atexit.register(exiting)
    _undo.append(lambda: atexit.unregister(exiting))


def uninstall():
    """Takes every patch and hook of install() back: torch is as it was before it (the step
    count and the heartbeat file stay). bench/python_instrument.sh's paired measurement."""
    global _installed
    while _undo:
        _undo.pop()()
    _phases.clear()
    _installed = False
