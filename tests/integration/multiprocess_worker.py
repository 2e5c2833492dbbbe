"""One process of the two-process sharded L-RVGA run of ``tests/integration/test_multiprocess.py``.

usage: python tests/integration/multiprocess_worker.py ROOT PORT NUM_PROCESSES PROCESS_ID OUT_PREFIX

The coordinator listens on 127.0.0.1:PORT only. Each process sees two CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=2``, set by the parent) and runs the same
filter over a mesh of all processes' devices twice: once from host arrays held in full by every
process, once from inputs built with ``jax.make_array_from_callback`` that read only this
process's columns. It writes the gathered results to ``OUT_PREFIX<PROCESS_ID>.npz``.
Exit status 77 (with the reason on stderr): jax.distributed with CPU collectives is unavailable.
"""
import sys

UNAVAILABLE = 77


def connect(port: int, num_processes: int, process_id: int):
    """Join the distributed system with gloo CPU collectives, or exit with :data:`UNAVAILABLE`."""
    import jax

    jax.config.update("jax_enable_x64", True)
    address = f"127.0.0.1:{port}"
    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(address, num_processes, process_id,
                                   coordinator_bind_address=address, initialization_timeout=60)
        jax.devices()  # builds the CPU client and its gloo collectives
    except Exception as err:  # any failure here means the installed jax cannot do this
        print(f"jax.distributed with gloo CPU collectives is unavailable: "
              f"{type(err).__name__}: {err}", file=sys.stderr)
        sys.exit(UNAVAILABLE)


def local_columns(mesh, d: int) -> set:
    """Indices along d held by this process's devices of a one-axis mesh."""
    import jax

    per = d // mesh.devices.size
    mine = [i for i, dev in enumerate(mesh.devices.flat) if dev.process_index == jax.process_index()]
    return {j for i in mine for j in range(i * per, (i + 1) * per)}


def main(root: str, port: int, num_processes: int, process_id: int, prefix: str):
    connect(port, num_processes, process_id)
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    sys.path.insert(0, root)
    import jaxrvga as jr
    from jaxrvga import sharding
    from tests.integration import test_multiprocess as tm

    assert jax.process_count() == num_processes and len(jax.local_devices()) == 2, jax.devices()
    base, traces = tm.make_filter(), []

    def update(state, x, y):
        traces.append(1)  # runs only while jax traces the update
        return base.update(state, x, y)

    flt = jr.Filter(base.init, update, base.check)
    X, y = tm.problem()
    mesh = sharding.make_mesh()
    final, info = sharding.run(flt, tm.initial_state(base), X, y, mesh, jr.trace_info)
    assert {s.data.shape for s in final.W.addressable_shards} == {(tm.D // mesh.devices.size, tm.RANK)}
    assert len(final.W.addressable_shards) == 2 and not final.W.is_fully_addressable
    compiled = len(traces)

    seen = []

    def load(index):  # a process reads only the columns of xs that its devices hold
        seen.append(index[1])
        return X[index]

    xs = jax.make_array_from_callback(X.shape, NamedSharding(mesh, P(None, "d")), load)
    again, _ = sharding.run(flt, tm.initial_state(base), xs, y, mesh, jr.trace_info)
    read = {j for s in seen for j in range(*s.indices(tm.D))}
    assert read == local_columns(mesh, tm.D), (sorted(read), jax.process_index())
    assert len(traces) == compiled, "the second sharding.run traced the filter again"

    out = sharding.gather({"final": final, "again": again, "info": info})
    flat = {"/".join(str(getattr(k, "name", getattr(k, "key", k))) for k in path): leaf
            for path, leaf in jax.tree_util.tree_leaves_with_path(out)}
    np.savez(f"{prefix}{process_id}.npz", traces=compiled, **flat)


if __name__ == "__main__":
    root, port, n, pid, prefix = sys.argv[1:]
    main(root, int(port), int(n), int(pid), prefix)
