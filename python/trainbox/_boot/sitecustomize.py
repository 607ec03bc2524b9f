# trainbox's start-up hook for Python workers of `trainbox run` (docs/python.md).
#
# The launcher puts this folder first on PYTHONPATH and sets TRAINBOX_INSTRUMENT=1 for a
# Python worker. Python imports this file at start-up (site.py's `import sitecustomize`). It
#   1. removes itself from PYTHONPATH, sys.path and TRAINBOX_INSTRUMENT, so the script and
#      any process it starts see the environment they would have seen without trainbox;
#   2. adds an import hook that patches torch right after the script itself imports it
#      (trainbox/_instrument.py) — torch is never imported here, and a script that never
#      imports torch is left alone;
#   3. runs the sitecustomize this one shadows (the user's on PYTHONPATH, the venv's or the
#      distribution's), exactly as Python would have, errors included.
# Cost: a few stat calls and two small modules at start-up (bench/python_instrument.sh).
import os as _os
import sys as _sys


def _trainbox_boot():
    here = _os.path.dirname(_os.path.abspath(__file__))
    same = lambda p: _os.path.abspath(p or ".") == here  # noqa: E731
    # --- 1. leave no trace in the environment ---
    parts = _os.environ.get("PYTHONPATH", "").split(_os.pathsep)
    for i, p in enumerate(parts):
        if same(p):
            del parts[i]
            break
    if any(parts):
        _os.environ["PYTHONPATH"] = _os.pathsep.join(parts)
    else:
        _os.environ.pop("PYTHONPATH", None)
    _sys.path[:] = [p for p in _sys.path if not same(p)]
    active = _os.environ.pop("TRAINBOX_INSTRUMENT", "") == "1" and _os.environ.get("TRAINBOX_HEARTBEAT_FILE")

    # --- 2. patch torch when the script imports it ---
    if active:
        pkg_dir = _os.path.dirname(here)

        def patch(torch):
            try:
                mod = _sys.modules.get("trainbox._instrument")
                if mod is None:
                    mod = _load_package(pkg_dir)
                mod.install(torch)
            except Exception as e:  # instrumentation must never fail a job
                print(f"trainbox: Python instrumentation off: {type(e).__name__}: {e}", file=_sys.stderr)

        _sys.meta_path.insert(0, _TorchHook(patch))

    # --- 3. the sitecustomize this one shadows ---
    me = _sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (the next one on sys.path, now that we are off it)
    except ImportError as e:
        if e.name != "sitecustomize":
            raise
        if me is not None:
            _sys.modules["sitecustomize"] = me


def _load_package(pkg_dir):
    """trainbox's own package (the one beside this folder), as `trainbox`, then its _instrument."""
    import importlib.util

    if "trainbox" not in _sys.modules:
        spec = importlib.util.spec_from_file_location(
            "trainbox", _os.path.join(pkg_dir, "__init__.py"), submodule_search_locations=[pkg_dir])
        mod = importlib.util.module_from_spec(spec)
        _sys.modules["trainbox"] = mod
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del _sys.modules["trainbox"]
            raise
    import trainbox._instrument

    return trainbox._instrument


class _TorchHook:
    """A meta-path finder that only watches for `torch`; after torch's own module has run,
    it calls `patch(torch)` and steps out of sys.meta_path."""

    def __init__(self, patch):
        self._patch = patch

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            _sys.meta_path.remove(self)
        except ValueError:
            pass
        for finder in _sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec
        patch = self._patch

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        loader.exec_module = exec_and_patch
        return spec

    def invalidate_caches(self):
        pass


try:
    _trainbox_boot()
finally:
    del _trainbox_boot
