# Writes data/onnx/efficientnet_external/: the `efficientnet` model of data/onnx/ (see
# onnx_export.py) saved again by the `onnx` package with every initializer in an external
# data file, as `onnx.save_model(..., save_as_external_data=True)` and large exports write
# them: `model.onnx` (the graph, each weight a location, offset and length) and
# `model.onnx.data` (the values), with the same `config.json`. tests/alkit/onnx.rs checks that
# alkit scores it as it scores the model it came from, and refuses it when the data file is
# cut short or a location leaves the model's folder.
#
# Usage: python tests/reference/onnx_external.py  (onnx==1.23.2)
import os
import shutil

import onnx

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "..", "data", "onnx")
src = os.path.join(root, "efficientnet")
dst = os.path.join(root, "efficientnet_external")
os.makedirs(dst, exist_ok=True)
model = onnx.load(os.path.join(src, "model.onnx"))
onnx.save_model(
    model,
    os.path.join(dst, "model.onnx"),
    save_as_external_data=True,
    all_tensors_to_one_file=True,
    location="model.onnx.data",
    size_threshold=0,
)
shutil.copy(os.path.join(src, "config.json"), os.path.join(dst, "config.json"))
onnx.checker.check_model(os.path.join(dst, "model.onnx"))
inits = onnx.load(os.path.join(dst, "model.onnx"), load_external_data=False).graph.initializer
external = sum(1 for t in inits if t.data_location == onnx.TensorProto.EXTERNAL)
print(f"{dst}: {external} of {len(inits)} initializers in model.onnx.data")
