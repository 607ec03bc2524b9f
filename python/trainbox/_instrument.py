"""Zero-code instrumentation: the phases of an unmodified PyTorch script, as heartbeats.

Installed by _boot/sitecustomize.py when `trainbox run` starts a Python worker, and only once
the script itself imports torch (an import hook; nothing here runs before that). Each patch
only writes the heartbeat record (_heartbeat.py) around the original call and returns its
result untouched, so results are bit for bit those of an uninstrumented run.

  step       the number of optimizer.step() calls (torch.optim's global step hooks)
  data       iterating a DataLoader (creating its iterator and each next())
  forward    the outermost nn.Module call (nested modules cost one branch each); once a
             DistributedDataParallel exists, its forward alone (the nn.Module.__call__ patch
             is taken back: a DDP script's step pays nothing per module)
  backward   torch.autograd.backward / grad (Tensor.backward goes through it)
  allreduce  torch.distributed.all_reduce, and a DDP backward once the local backward is
             done (autograd's end-of-backward callback, queued ahead of DDP's own wait for the
             gradient allreduce: what is left of backward is that wait)
  broadcast, all_gather, reduce_scatter, all_to_all, reduce, gather, scatter, send, recv,
  barrier    the other torch.distributed collectives
             (DDP's construction broadcasts rank 0's weights: broadcast)
  optimizer  optimizer.step()
  checkpoint torch.save / torch.load
  user_code  the script's own code between those calls
  done       the interpreter is exiting
Every wrapper restores the phase it found on return, so nesting (a DDP buffer broadcast
inside forward) reads right. Threads share one record (last writer wins).

  rendezvous torch.distributed.init_process_group (the process group forming)

Start-up: nothing is written before the script calls init_process_group (or, in a script
without one, before its first collective returns or its first optimizer step is done). From
that call on every phase is written, beginning with `rendezvous`, as `trainbox train` does.
So a rank that never gets there (stopped, or stuck in its imports) has no record while the
others have one, and the launcher names it as a start-up stall after --stall-timeout
("ranks 0, 2 wait in rendezvous"), instead of every rank waiting silently for c10d's own
timeout. Ranks that merely import torch at different speeds are not affected unless one is
later than the others by the whole stall timeout (180 s by default).
"""
import atexit
import functools
import importlib

from . import _heartbeat as hb

_beat = hb.beat_bytes
_installed = False


def _phase_wrapper(fn, phase, arms=False, arms_first=False):
    """fn, reporting `phase` while it runs. arms: once it returns every rank has been here, so
    from then on a wait is a stall; arms_first: from its call on (init_process_group)."""
    p = hb.encode_phase(phase)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if arms_first:
            hb.arm()
        prev = hb._phase
        _beat(hb._step, p)
        try:
            return fn(*args, **kwargs)
        finally:
            _beat(hb._step, prev)
            if arms and hb._held is not None:
                hb.arm()

    wrapper.__trainbox_wrapped__ = fn
    return wrapper


def _wrap_attr(owner, name, phase, arms=False, arms_first=False):
    fn = getattr(owner, name, None)
    if fn is None or getattr(fn, "__trainbox_wrapped__", None) is not None:
        return
    setattr(owner, name, _phase_wrapper(fn, phase, arms, arms_first))


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


def _patch_distributed(torch):
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return
    c10d = dist.distributed_c10d
    for name, phase in _COLLECTIVES.items():
        orig = getattr(c10d, name, None)
        if orig is None:
            continue
        _wrap_attr(c10d, name, phase, arms=True)
        # torch.distributed re-exports them: keep both names on the one wrapper
        if getattr(dist, name, None) is orig:
            setattr(dist, name, getattr(c10d, name))


def _patch_init(torch):
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return
    c10d = dist.distributed_c10d
    orig = getattr(c10d, "init_process_group", None)
    if orig is None:
        return
    # from this call on a rank that has not arrived is a start-up stall (module docstring)
    _wrap_attr(c10d, "init_process_group", "rendezvous", arms_first=True)
    if getattr(dist, "init_process_group", None) is orig:
        dist.init_process_group = c10d.init_process_group


def _patch_ddp(torch, unpatch_module_call):
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.autograd import Variable
    except Exception:
        return
    allreduce = hb.encode_phase("allreduce")
    forward_phase = hb.encode_phase("forward")
    init = DDP.__init__
    if getattr(init, "__trainbox_wrapped__", None) is None:
        broadcasting = _phase_wrapper(init, "broadcast", arms=True)  # rank 0's weights to all

        @functools.wraps(init)
        def ddp_init(self, *args, **kwargs):
            broadcasting(self, *args, **kwargs)
            unpatch_module_call()  # from now on DDP's forward marks `forward` (module docstring)

        ddp_init.__trainbox_wrapped__ = init
        DDP.__init__ = ddp_init
    forward = DDP.forward
    if getattr(forward, "__trainbox_wrapped__", None) is not None:
        return

    def local_backward_done():
        if hb._phase != allreduce:
            _beat(hb._step, allreduce)

    # The reducer runs in C++; what Python can see is a gradient landing. One parameter's
    # post-accumulate hook (not one per parameter: each costs a call from C++ per step) queues
    # a callback for the end of this backward; it runs before DDP's own end-of-backward wait,
    # which was queued later, once the last bucket was ready.
    def arm(ddp):
        st = ddp.__dict__.get("_trainbox_armed")
        if st is None:
            params = [p for p in ddp.module.parameters() if p.requires_grad]
            st = ddp.__dict__["_trainbox_armed"] = [False]

            def landed(_param, st=st):
                if st[0]:
                    st[0] = False
                    Variable._execution_engine.queue_callback(local_backward_done)

            # the last parameter's gradient is among the first computed
            if params and hasattr(params[-1], "register_post_accumulate_grad_hook"):
                params[-1].register_post_accumulate_grad_hook(landed)
        st[0] = bool(ddp.require_backward_grad_sync)  # no_sync(): no allreduce follows

    @functools.wraps(forward)
    def ddp_forward(self, *args, **kwargs):
        arm(self)
        prev = hb._phase
        _beat(hb._step, forward_phase)
        try:
            return forward(self, *args, **kwargs)
        finally:
            _beat(hb._step, prev)

    ddp_forward.__trainbox_wrapped__ = forward
    DDP.forward = ddp_forward


def _patch_module_call(torch):
    """Patches nn.Module.__call__; returns what takes the patch back."""
    Module = torch.nn.Module
    call = Module.__call__
    if getattr(call, "__trainbox_wrapped__", None) is not None:
        return lambda: None
    forward = hb.encode_phase("forward")
    depth = [0]

    @functools.wraps(call)
    def module_call(self, *args, **kwargs):
        if depth[0]:
            return call(self, *args, **kwargs)
        prev = hb._phase
        depth[0] = 1
        _beat(hb._step, forward)
        try:
            return call(self, *args, **kwargs)
        finally:
            depth[0] = 0
            _beat(hb._step, prev)

    module_call.__trainbox_wrapped__ = call
    Module.__call__ = module_call

    def unpatch():
        if Module.__call__ is module_call:
            Module.__call__ = call

    return unpatch


def _patch_optimizer(torch):
    opt = importlib.import_module("torch.optim.optimizer")  # torch.optim deletes the attribute
    pre_hook = getattr(opt, "register_optimizer_step_pre_hook", None)
    post_hook = getattr(opt, "register_optimizer_step_post_hook", None)
    if pre_hook is None or post_hook is None:
        return
    optimizer = hb.encode_phase("optimizer")
    saved = []

    def pre(_optimizer, _args, _kwargs):
        saved.append(hb._phase)
        _beat(hb._step, optimizer)

    def post(_optimizer, _args, _kwargs):
        if hb._held is not None:
            hb.arm()
        _beat(hb._step + 1, saved.pop() if saved else hb.encode_phase("user_code"))

    pre_hook(pre)
    post_hook(post)


def install(torch):
    """Patches `torch` (the module, fully imported). Idempotent; a no-op outside trainbox run."""
    global _installed
    if _installed or not hb.active():
        return
    _installed = True
    hb._phase = hb.encode_phase("user_code")  # the base phase
    hb.hold()  # nothing written until every rank has joined (see the module's docstring)
    data = torch.utils.data.dataloader
    _wrap_attr(data._BaseDataLoaderIter, "__next__", "data")
    _wrap_attr(data.DataLoader, "__iter__", "data")
    unpatch_module_call = _patch_module_call(torch)
    _wrap_attr(torch.autograd, "backward", "backward")
    _wrap_attr(torch.autograd, "grad", "backward")
    _patch_distributed(torch)
    _patch_init(torch)
    _patch_ddp(torch, unpatch_module_call)
    _patch_optimizer(torch)
    for owner in (torch, torch.serialization):
        _wrap_attr(owner, "save", "checkpoint")
        _wrap_attr(owner, "load", "checkpoint")
    done = hb.encode_phase("done")
    atexit.register(lambda: _beat(hb._step, done))
