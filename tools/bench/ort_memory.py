"""RSS of one ONNX Runtime session after model calls of given shapes (docs/benchmarks.md,
"Pipeline memory").

    ~/.freshet/venv/bin/python tools/bench/ort_memory.py <arena|noarena> <pattern|nopattern> \
        <trim|notrim> BATCHxTOKENS [BATCHxTOKENS ...]

Loads the default model (all-MiniLM-L6-v2 int8) with one intra-op thread, as each pipeline
worker runs it, with ONNX Runtime's CPU arena and memory pattern on or off, runs one call per
shape on random token ids, optionally calls glibc's malloc_trim(0) after each, and prints the
process's RSS and the call's time after each.
"""

import ctypes
import os
import sys
import time

import numpy as np
import onnxruntime as ort

MODEL = os.path.expanduser(
    os.environ.get("FRESHET_MODEL_DIR", "~/.freshet/models/all-MiniLM-L6-v2-int8")
)


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    return 0


def main():
    arena, pattern, trim = (
        sys.argv[1] == "arena",
        sys.argv[2] == "pattern",
        sys.argv[3] == "trim",
    )
    shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[4:]]
    libc = ctypes.CDLL("libc.so.6")
    so = ort.SessionOptions()
    so.enable_cpu_mem_arena = arena
    so.enable_mem_pattern = pattern
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(
        os.path.join(MODEL, "model.onnx"), so, providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in s.get_inputs()]
    out = [f"arena={arena} pattern={pattern} trim={trim} loaded={rss_mb()}MB"]
    for b, n in shapes:
        feed = {
            "input_ids": np.random.randint(1000, 20000, (b, n)).astype(np.int64),
            "attention_mask": np.ones((b, n), np.int64),
            "token_type_ids": np.zeros((b, n), np.int64),
        }
        t = time.time()
        s.run(None, {k: v for k, v in feed.items() if k in names})
        dt = time.time() - t
        if trim:
            libc.malloc_trim(0)
        out.append(f"{b}x{n}:{rss_mb()}MB/{dt:.2f}s")
    print(" ".join(out))


if __name__ == "__main__":
    main()
