"""What a compiled model costs before any key exists: evaluation-key bytes per kind, the client's upload per input
batch, the server's peak memory and the seconds of keygen / encrypt / run (``hemlp.compile`` stores them in
``compiled.plan.info["resources"]`` and prints them with the plan; ``python -m hemlp.bench estimates`` checks
them against measurements).

The counts come from the layout (hemlp.layouts.base.Layout: key_inventory, ciphertexts_in / _out,
prepared_bytes, working_bytes); the sizes are those of the formats: a key-switching key for level l is
Params.switch_key_bytes(l) serialised (its a-halves travel as seeds); a fresh ciphertext encrypted by the client
under its secret key is N (l + 1) words (the a-half is a seed), twice that in memory and for every ciphertext a run
produces.

Server memory (``server_memory``, docs/models.md "Plans that fit the machine"): a server process has two peaks and
holds the larger one.

* Importing the keys: the file or upload body, then the decoders' copies (KEY_IMPORT_FACTOR times the serialised
  relinearisation / rotation keys, BOOT_KEY_IMPORT_FACTOR times the bootstrapping keys in memory). What the import
  frees the process keeps and the run reuses, so this peak does not add to the next one. A plan compiled with
  import_keys=False (the server process makes its keys) imports nothing.
* Running: the process and its context's tables, every key resident (KEY_RESIDENT_FACTOR: the a-halves expanded;
  the bootstrapping keys as boot_key_bytes counts them), the input and its file bytes while it is read
  (TRANSIENT_FACTOR), what prepare() keeps (layout (P): its encoded diagonals, sized to the budget) and the
  layout's working set (its ciphertexts, the bootstrapper's encoded DFT matrices, the largest step's temporaries).

Times use the planner's unit costs (hemlp.planner.layouts.unit_costs, from the active cost profile, which the
plan names: hemlp.planner.cost_model): the layout's seconds_estimate() (client
encryption included) split into encrypt and run, the layout's prepare_seconds_estimate() (the server encodes the
weights once, before its first batch), and keygen as a fixed part plus seconds per byte of key material.
Measured against these estimates: python -m hemlp.bench estimates, bench/estimates.json.

Per node (``estimate_nodes``, compile's ``nodes=`` / ``node_memory=``): a batch split over K nodes (the layout's
node_peak: layout (A) by ciphertext ranges and FHE4DMM row splits, hemlp.runtime.shards) costs each node the base
process, every evaluation key it needs (counted once per node: each node holds and imports its own copy of the
relinearisation and bootstrapping keys), the encoded weights, its ciphertext shards at its peak and a working set
(the rows or partial sums it receives, the transient buffers on its share of the input). With K = 1 that is the
server estimate (``estimate_resources(layout, boot_key_bytes)``, whose peak counts the bootstrapping keys and the
plan's "server: peak memory" line says so): the figure compile checks against server_memory.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hemlp.errors import ResourceError
from hemlp.planner.cost_model import active_profile
from hemlp.planner.layouts import unit_costs
from hemlp.step_ops import REFRESH_OPS

__all__ = ["Resources", "ServerMemory", "estimate_resources", "server_memory", "available_memory_bytes", "human_bytes",
           "KEYGEN_S_PER_BYTE", "SERVER_BASE_BYTES", "NodeResources", "estimate_nodes", "check_nodes", "fewest_nodes"]

GIB = 2.0 ** 30
#: seconds of key generation per serialised key byte (PRNG, Gaussian error, NTTs and the P·s products of each
#: digit), one thread; measured with `python -m hemlp.bench estimates` (N = 2^12 and 2^15 test sets, warm, on a
#: shared machine)
KEYGEN_S_PER_BYTE = 2.2e-9
#: seconds of the key pair itself and the per-call work of keygen() (sampling, the public key, Python); a process's
#: first keygen also starts the native thread pool and tables (a few ms more)
KEYGEN_BASE_S = 3e-4
#: the server process before any hemlp object: the interpreter, numpy and the native core (measured 46 MB; with a
#: margin, as it varies with the environment's packages and allocator: the small plans' estimates rest on it)
SERVER_BASE_BYTES = 52 * 2 ** 20
#: the context's precomputed tables, in words per N (L + 1 + |P|) (measured 4.0-4.1 at N = 2^15 and 2^16)
CONTEXT_TABLE_FACTOR = 4
#: a relinearisation / rotation key in memory per serialised byte: its a-half expanded from the seed
KEY_RESIDENT_FACTOR = 2.0
#: the peak of importing relinearisation / rotation keys per serialised byte: the file or body, and each key
#: imported once into its set with its a-half expanded (measured 3.0 at N = 2^12 and 2^15)
KEY_IMPORT_FACTOR = 3.1
#: the peak of importing bootstrapping keys per byte they hold in memory, by pipeline (the boot steps' order): the
#: file or body (~0.62 of their memory: the a-halves travel as seeds) and the keys, those of the seeded levels
#: imported seeded (single CtS-first keys: measured 1.62-1.63, N = 2^12 and 2^15; batched S2C-first keys: 1.98)
BOOT_KEY_IMPORT_FACTOR = {"cts_first": 1.7, "s2c_first": 2.05}
#: working memory of the native products on top of the values the layouts hold (GEMM buffers, key-switch
#: temporaries, the file bytes of the input while it is read): a factor on the input batch in memory
TRANSIENT_FACTOR = 1.0


@dataclass
class Resources:
    """Estimates for one batch of batch_size samples (bytes and seconds)."""
    key_bytes: dict = field(default_factory=dict)   # kind -> serialised bytes ("relin", "rotation", ...)
    key_counts: dict = field(default_factory=dict)  # kind -> number of key-switching keys
    upload_bytes: int = 0                            # the client's encrypted input batch
    download_bytes: int = 0                          # the server's encrypted result
    server_memory_bytes: int = 0                     # peak resident memory of a server process running one batch
    keygen_seconds: float = 0.0
    encrypt_seconds: float = 0.0
    run_seconds: float | None = None                 # None: the layout has no time estimate
    prepare_seconds: float = 0.0                     # the server's one-time encoding of the weights (prepare())
    cost_profile: str = ""                           # where the unit costs came from (CostProfile.source)
    boot_key_bytes: int = 0                          # bootstrapping keys in memory (in server_memory_bytes)
    import_memory_bytes: int = 0                     # the server's peak while it imports the keys
    run_memory_bytes: int = 0                        # the server's peak while it runs (keys resident)
    prepared_bytes: int = 0                          # what prepare() keeps (in run_memory_bytes)

    @property
    def eval_key_bytes(self) -> int:
        return sum(self.key_bytes.values())

    def to_json(self) -> dict:
        return dict(asdict(self), eval_key_bytes=self.eval_key_bytes)

    @classmethod
    def from_json(cls, d: dict) -> "Resources":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def lines(self, batch: int) -> list[str]:
        def count(k):
            n = self.key_counts.get(k, 1)
            return f"{n} key{'s' if n != 1 else ''}"

        keys = ", ".join(f"{k} {human_bytes(v)} ({count(k)})" for k, v in self.key_bytes.items())
        run = "n/a" if self.run_seconds is None else f"{self.run_seconds:.3g} s"
        return [f"estimates before any key exists (batch of {batch}):",
                f"  evaluation keys {human_bytes(self.eval_key_bytes)}" + (f": {keys}" if keys else " (none needed)")
                + f"; keygen ~{self.keygen_seconds:.3g} s",
                f"  client upload {human_bytes(self.upload_bytes)} per input batch "
                f"(encrypt ~{self.encrypt_seconds:.3g} s), "
                f"download {human_bytes(self.download_bytes)}",
                f"  server: peak memory ~{human_bytes(self.server_memory_bytes)}" + self.phases()
                + (f" (bootstrapping keys ~{human_bytes(self.boot_key_bytes)} included)" if self.boot_key_bytes
                   else "") + ", "
                + (f"prepare ~{self.prepare_seconds:.3g} s once, " if self.prepare_seconds >= 0.05 else "")
                + f"run ~{run} per batch (one thread)"] + (
                    [f"  time estimates from the cost profile: {self.cost_profile}"] if self.cost_profile else [])


    def phases(self) -> str:
        """' while importing the keys, ~Y running' when the import is the larger peak (plans from before the two
        were estimated: '')."""
        if not self.run_memory_bytes or self.import_memory_bytes <= self.run_memory_bytes:
            return ""
        return f" while importing the keys, ~{human_bytes(self.run_memory_bytes)} running"


def available_memory_bytes() -> int | None:
    """What this machine can give a new allocation now (MemAvailable: free memory and the page cache it can drop),
    or None where /proc/meminfo cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


def _ct_bytes(N: int, level: int, seeded: bool = False) -> int:
    return (1 if seeded else 2) * N * (int(level) + 1) * 8


@dataclass
class ServerMemory:
    """A server process's memory for one batch, term by term (bytes; the module docstring)."""
    base: int = 0          # the process and its context's tables
    keys: int = 0          # relinearisation / rotation keys resident
    boot_keys: int = 0     # bootstrapping keys resident
    key_import: int = 0    # what importing the keys holds at its peak (the body and the decoders' copies)
    input: int = 0         # the input ciphertexts and, while they are read, their bytes
    prepared: int = 0      # what prepare() keeps (encoded weights / diagonals)
    working: int = 0       # the layout's working set (hemlp.layouts.base.Layout.working_bytes)

    @property
    def importing(self) -> int:
        return self.base + self.key_import

    @property
    def running(self) -> int:
        return self.base + self.keys + self.boot_keys + self.input + self.prepared + self.working

    @property
    def peak(self) -> int:
        return max(self.importing, self.running)

    def to_json(self) -> dict:
        return dict(asdict(self), importing=self.importing, running=self.running, peak=self.peak)

    def describe(self) -> str:
        """The two peaks and what the run holds, in GiB (compile's refusals name them)."""
        g = lambda n: f"~{n / GIB:.3g} GiB"     # noqa: E731
        return (f"importing the keys {g(self.importing)}, running {g(self.running)}: keys {g(self.keys)}, "
                f"bootstrapping keys {g(self.boot_keys)}, kept by prepare() {g(self.prepared)}, working set "
                f"{g(self.working)}, input {g(self.input)}, process {g(self.base)}")


def key_bytes(layout) -> dict:
    """{kind: (serialised bytes, count)} of a planned layout's relinearisation / rotation / ModPack keys."""
    out = {}
    for kind, (count, level) in layout.key_inventory().items():
        if level is not None and count:
            out[kind] = (int(count) * layout.params.switch_key_bytes(int(level)), int(count))
    return out


def boot_key_order(layout) -> str:
    """The pipeline of a layout's bootstraps ("cts_first": single keys, "s2c_first": batched keys)."""
    order = next((s.info.order for s in layout.steps if s.op in REFRESH_OPS), None)
    return order or "cts_first"


def context_bytes(params) -> int:
    """The context's tables (CONTEXT_TABLE_FACTOR)."""
    return CONTEXT_TABLE_FACTOR * params.N * (params.max_level + 1 + len(params.p)) * 8


def server_memory(layout, boot_key_bytes: int = 0, eval_key_bytes: int | None = None) -> ServerMemory:
    """A planned layout's server memory term by term (the module docstring). boot_key_bytes: its bootstrapping keys
    in memory (hemlp.layouts.boot_choice.boot_key_bytes; the planner does not import the layouts); eval_key_bytes:
    its serialised relinearisation / rotation keys (from key_inventory when None)."""
    serialised = sum(b for b, _ in key_bytes(layout).values()) if eval_key_bytes is None else int(eval_key_bytes)
    boot = int(boot_key_bytes)
    input_mem = layout.ciphertexts_in() * _ct_bytes(layout.params.N, layout.top_level)
    # compile's import_keys=False: the server process makes its keys, nothing is imported
    imported = layout.options.get("import_keys", True)
    return ServerMemory(
        base=SERVER_BASE_BYTES + context_bytes(layout.params), keys=int(KEY_RESIDENT_FACTOR * serialised),
        boot_keys=boot,
        key_import=int(KEY_IMPORT_FACTOR * serialised + (BOOT_KEY_IMPORT_FACTOR[boot_key_order(layout)] * boot
                                                         if boot else 0)) if imported else 0,
        input=int(input_mem * (1 + TRANSIENT_FACTOR)), prepared=int(layout.prepared_bytes()),
        working=int(layout.working_bytes()))


def estimate_resources(layout, boot_key_bytes: int = 0) -> Resources:
    """The resources of a planned layout (hemlp.layouts.base.Layout) for its batch size. boot_key_bytes: its
    bootstrapping keys in memory (hemlp.layouts.boot_choice.boot_key_bytes; the planner does not import the layouts),
    counted in the server's peak as compile's memory check counts them."""
    params = layout.params
    N, top = params.N, layout.top_level
    r = Resources()
    for kind, (nbytes, count) in key_bytes(layout).items():
        r.key_bytes[kind], r.key_counts[kind] = nbytes, count
    n_in = layout.ciphertexts_in()
    n_out, lv_out = layout.ciphertexts_out()
    r.upload_bytes = n_in * _ct_bytes(N, top, seeded=True)
    r.download_bytes = n_out * _ct_bytes(N, lv_out)
    r.boot_key_bytes = int(boot_key_bytes)
    mem = server_memory(layout, boot_key_bytes, r.eval_key_bytes)
    r.server_memory_bytes, r.import_memory_bytes, r.run_memory_bytes = mem.peak, mem.importing, mem.running
    r.prepared_bytes = mem.prepared
    c = unit_costs()
    r.cost_profile = active_profile().source
    r.keygen_seconds = KEYGEN_BASE_S + r.eval_key_bytes * KEYGEN_S_PER_BYTE
    r.encrypt_seconds = n_in * N * (top + 1) * c["encrypt"]
    r.prepare_seconds = float(layout.prepare_seconds_estimate())
    total = layout.seconds_estimate()
    if total is not None:
        r.run_seconds = max(0.0, float(total) - r.encrypt_seconds)
    return r


#: the most nodes fewest_nodes looks at
MAX_NODES = 4096


@dataclass
class NodeResources:
    """One node's estimated peak when a batch is split over `nodes` nodes (bytes; estimate_nodes)."""
    nodes: int = 1
    peak_bytes: int = 0          # base + the larger of importing the keys and keys + weights + shards + working
    base_bytes: int = 0          # the process and its context's tables
    key_bytes: int = 0           # every evaluation key in memory, bootstrapping keys included: once per node
    import_bytes: int = 0        # importing those keys at its peak (the body and the decoders' copies)
    weight_bytes: int = 0        # the encoded weights (prepared)
    shard_bytes: int = 0         # the node's ciphertexts resident at its peak (its share of the input included)
    working_bytes: int = 0       # rows / partial sums received from other nodes at the peak + transient buffers
    split: str = ""              # how the batch splits over the nodes
    splits: list = field(default_factory=list)   # per matrix step: split, bytes moved per node, rows per block
    at: str | None = None        # the step at the peak
    node_memory: int | None = None   # the budget the plan was checked against (None: not checked)

    @property
    def running_bytes(self) -> int:
        """What the node holds running (keys resident), the base process excluded."""
        return self.key_bytes + self.weight_bytes + self.shard_bytes + self.working_bytes

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "NodeResources":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def lines(self) -> list[str]:
        budget = "" if self.node_memory is None else f" (node memory {human_bytes(self.node_memory)})"
        return [f"  per node: peak ~{human_bytes(self.peak_bytes)} on each of {self.nodes} node(s){budget}: keys "
                f"~{human_bytes(self.key_bytes)} (held once per node), ciphertext shards "
                f"~{human_bytes(self.shard_bytes)}, encoded weights ~{human_bytes(self.weight_bytes)}, working set "
                f"~{human_bytes(self.working_bytes)}" + (f", peak at {self.at}" if self.at else "")
                + (f"; importing the keys ~{human_bytes(self.base_bytes + self.import_bytes)} (the larger peak)"
                   if self.import_bytes > self.running_bytes else ""),
                f"  split: {self.split}"]


def estimate_nodes(layout, nodes: int, boot_key_bytes: int = 0, resources: Resources | None = None,
                   node_memory: int | None = None) -> NodeResources:
    """Each node's peak for a planned layout whose batch is split over `nodes` nodes (module docstring).
    boot_key_bytes: its bootstrapping keys in memory (hemlp.layouts.boot_choice.boot_key_bytes; the planner does
    not import the layouts); resources: its estimate_resources (computed when None)."""
    mem = server_memory(layout, boot_key_bytes, None if resources is None else resources.eval_key_bytes)
    nd = layout.node_peak(int(nodes))
    out = NodeResources(nodes=int(nodes), base_bytes=mem.base, key_bytes=mem.keys + mem.boot_keys,
                        import_bytes=mem.key_import, weight_bytes=mem.prepared,
                        shard_bytes=int(nd["peak"] - nd["extra"]),
                        working_bytes=int(nd["extra"] + TRANSIENT_FACTOR * nd["input"]), split=nd["split"],
                        splits=list(nd["splits"]), at=nd["at"], node_memory=node_memory)
    out.peak_bytes = out.base_bytes + max(out.import_bytes, out.running_bytes)
    return out


def fewest_nodes(layout, boot_key_bytes: int, budget: int, resources: Resources | None = None,
                 start: int = 1) -> NodeResources | None:
    """The estimate for the fewest nodes >= start whose per-node peak fits `budget` (None: none up to MAX_NODES
    does: the keys and the unsplittable part exceed it). One node more, then doubling past 64."""
    r = estimate_resources(layout) if resources is None else resources
    k = max(1, int(start))
    while k <= MAX_NODES:
        est = estimate_nodes(layout, k, boot_key_bytes, r)
        if est.peak_bytes <= budget:
            return est
        k = k + 1 if k < 64 else k * 2
    return None


def check_nodes(layout, est: NodeResources, budget: int | None, boot_key_bytes: int = 0,
                resources: Resources | None = None) -> None:
    """ResourceError naming the fixes when a node's estimated peak exceeds `budget` (before any key exists)."""
    if budget is None or est.peak_bytes <= budget:
        return
    fit = fewest_nodes(layout, boot_key_bytes, budget, resources, start=est.nodes + 1)
    fixed = est.base_bytes + max(est.import_bytes, est.key_bytes + est.weight_bytes)
    more = (f"nodes={fit.nodes} (the fewest whose peak fits: ~{fit.peak_bytes / GIB:.3g} GiB each)" if fit else
            f"no number of nodes up to {MAX_NODES} fits: each node imports and holds ~{fixed / GIB:.3g} GiB of keys, "
            "weights and process whatever the split")
    chunks, slots = getattr(layout, "chunks", None), layout.params.N // 2
    if chunks == 1:
        batch = (f"a smaller batch_size does not help below {slots} samples (layout {layout.label} holds one "
                 "ciphertext per feature for a whole chunk of slots)")
        stream = ("streaming: what the plan can stream already runs by blocks (chains PCMM -> activations -> PCMM "
                  "in process, the rows a PCMM receives from other nodes); the rest is whole layers' shards (the "
                  f"peak is at {est.at}; split: {est.split})")
    else:
        batch = (f"a smaller batch_size ({f'{chunks} chunks of {slots} slots: ' if chunks else ''}the shards grow "
                 "with the batch)")
        stream = ("streaming: run the batch as a resumable job of smaller batches (hemlp.runtime.jobs, `hemlp "
                  "batch`), each node then holding one batch's shards at a time")
    raise ResourceError(
        f"the plan needs ~{est.peak_bytes / GIB:.3g} GiB on each of {est.nodes} node(s) (keys "
        f"~{est.key_bytes / GIB:.3g} GiB held once per node, ~{est.import_bytes / GIB:.3g} GiB while importing them, "
        f"ciphertext shards ~{est.shard_bytes / GIB:.3g} GiB, "
        f"encoded weights ~{est.weight_bytes / GIB:.3g} GiB, working set ~{est.working_bytes / GIB:.3g} GiB; "
        f"estimated before any key or ciphertext exists), above the node memory of {budget / GIB:.3g} GiB. Fixes: "
        f"more nodes: {more}; {batch}; {stream}; or "
        "node_memory=<bytes> when the nodes have more memory (node_memory=None: server_memory's budget)")
