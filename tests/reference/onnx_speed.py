# The Python baselines for alkit's ONNX forward speed (`onnx::onnx_forward_speed`, ignored,
# run by hand): images/s of each model of data/onnx/ through ONNX Runtime in Python and
# through PyTorch on the CPU (the same timm model and seed the export used), at one thread
# count, one JSON line per model and runtime.
#
# Usage: python tests/reference/onnx_speed.py [THREADS] [BATCH] [REPS]  (torch 2.15,
# timm==1.0.31, onnxruntime 1.32, numpy); defaults 2, 32, 10.
import json, os, sys, time

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 32
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 10

import numpy as np
import onnxruntime as ort
import timm
import torch

torch.set_num_threads(threads)
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..", "data", "onnx")


def rate(run):
    run()  # warm-up
    t = time.perf_counter()
    for _ in range(reps):
        run()
    return batch * reps / (time.perf_counter() - t)


for name, arch, seed in [("resnet", "test_resnet", 1), ("efficientnet", "test_efficientnet", 2), ("vit", "test_vit", 3)]:
    x = np.random.default_rng(0).standard_normal((batch, 3, 160, 160), dtype=np.float32)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(os.path.join(root, name, "model.onnx"), opts, providers=["CPUExecutionProvider"])
    print(json.dumps({"model": name, "runtime": "onnxruntime-python", "threads": threads, "batch": batch,
                      "images_per_s": round(rate(lambda: sess.run(None, {"input": x})), 1)}))
    torch.manual_seed(seed)
    m = timm.create_model(arch, pretrained=False, num_classes=10).eval()
    xt = torch.from_numpy(x)
    with torch.inference_mode():
        r = rate(lambda: m(xt))
    print(json.dumps({"model": name, "runtime": "pytorch-cpu", "threads": threads, "batch": batch,
                      "images_per_s": round(r, 1)}))
