"""Type stubs of alkit's native module (``alkit._alkit``). Use the package's functions
(``alkit.score``, ...): they convert inputs to the float32 arrays these expect."""

import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

__version__: str

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

def registry() -> List[Tuple[str, str, bool]]: ...
def scorer_settings() -> str: ...
def score_arrays(
    scorers: Sequence[str],
    *,
    probs: Optional[F32] = None,
    draws: Optional[F32] = None,
    layout: str = "nct",
    features: Optional[F32] = None,
    weight: Optional[F32] = None,
    bias: Optional[F32] = None,
    train_features: Optional[F32] = None,
    train_labels: Optional[I64] = None,
    settings: Optional[str] = None,
) -> List[Tuple[str, F32]]: ...
def score_data(
    checkpoints: Sequence[str],
    data: str,
    scorers: Sequence[str],
    *,
    split: str = "train",
    batch: Optional[int] = None,
    seed: int = 0,
    settings: Optional[str] = None,
    onnx_features: Optional[str] = None,
    onnx_config: Optional[str] = None,
    input_mean: Optional[Sequence[float]] = None,
    input_std: Optional[Sequence[float]] = None,
) -> Tuple[npt.NDArray[np.uintp], List[str], List[Tuple[str, F32]]]: ...
def select(
    scores: F32, k: int, *, method: str = "top-k", beta: float = 1.0, seed: int = 0
) -> npt.NDArray[np.uintp]: ...
def select_batch(
    name: str,
    k: int,
    *,
    draws: Optional[F32] = None,
    layout: str = "nct",
    features: Optional[F32] = None,
    weight: Optional[F32] = None,
    bias: Optional[F32] = None,
    classes: Optional[int] = None,
    labeled: Optional[F32] = None,
    candidates: Optional[int] = None,
    seed: int = 0,
    settings: Optional[str] = None,
    max_configs: Optional[int] = None,
) -> npt.NDArray[np.uintp]: ...
def ood_metrics(in_scores: F32, out_scores: F32) -> Dict[str, float]: ...
def score_gaussian(
    scorers: Sequence[str], means: F32, variances: F32
) -> List[Tuple[str, F32]]: ...
def regression(
    y: npt.NDArray[np.float64],
    mean: npt.NDArray[np.float64],
    std: npt.NDArray[np.float64],
    levels: Optional[List[float]] = None,
) -> Dict[str, object]: ...
def conformal_intervals(
    cal_y: npt.NDArray[np.float64],
    cal_a: npt.NDArray[np.float64],
    cal_b: npt.NDArray[np.float64],
    a: npt.NDArray[np.float64],
    b: npt.NDArray[np.float64],
    alpha: float,
    *,
    score: str = "absolute",
    cal_groups: Optional[I64] = None,
    groups: Optional[I64] = None,
) -> Tuple[Dict[Optional[int], float], npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
def calibration(
    probs: F32, labels: I64, scores: Optional[List[Tuple[str, F32]]] = None
) -> Dict[str, object]: ...
def fit_temperature(logits: F32, labels: I64) -> float: ...
def fit_platt(
    scores: npt.NDArray[np.float64], positive: npt.NDArray[np.bool_]
) -> Tuple[float, float]: ...
def surface(
    settings: Optional[str] = None, beside: List[str] = ..., out: Optional[str] = None
) -> Dict[str, object]: ...
def surface_settings() -> str: ...
def conformal(
    cal_probs: F32,
    cal_labels: I64,
    probs: F32,
    alpha: float,
    *,
    score: str = "aps",
    raps_lambda: float = 0.01,
    raps_k_reg: int = 5,
    seed: int = 0,
    cal_draws: Optional[npt.NDArray[np.float64]] = None,
    draws: Optional[npt.NDArray[np.float64]] = None,
    mondrian: bool = False,
) -> Tuple[List[float], npt.NDArray[np.bool_]]: ...

def curve(
    out: str,
    *,
    data: Optional[str] = None,
    train: Optional[Tuple[F32, I64]] = None,
    test: Optional[Tuple[F32, I64]] = None,
    classes: Optional[List[str]] = None,
    scorers: Optional[List[str]] = None,
    model: Optional[str] = None,
    seed: Optional[int] = None,
    seeds: Optional[int] = None,
    initial: Optional[int] = None,
    query: Optional[int] = None,
    cycles: Optional[int] = None,
    steps: Optional[int] = None,
    batch_size: Optional[int] = None,
    lr: Optional[float] = None,
    ensemble: Optional[int] = None,
    subsample: Optional[int] = None,
    cold_start: bool = False,
    balanced_start: bool = False,
    hidden: Optional[List[int]] = None,
    stop: Optional[str] = None,
    scorer_settings: Optional[str] = None,
    stream: bool = False,
    jobs: Optional[int] = None,
    force: bool = False,
    resume: bool = False,
) -> Tuple[
    List[
        Tuple[
            str,
            int,
            List[
                Tuple[
                    int,
                    int,
                    float,
                    float,
                    Optional[float],
                    List[Optional[float]],
                    Optional[Tuple[Optional[float], Optional[float], float, Optional[float]]],
                ]
            ],
        ]
    ],
    List[
        Tuple[
            str,
            int,
            float,
            float,
            float,
            float,
            float,
            float,
            Tuple[float, float, float],
            Optional[Tuple[float, float, float, float]],
            Optional[Tuple[float, float, float, float]],
            str,
        ]
    ],
]: ...

class Session:
    def __init__(self, state: str) -> None: ...
    @staticmethod
    def start(
        state: str,
        pool: str,
        *,
        labels: Optional[str] = None,
        classes: Optional[List[str]] = None,
        model: Optional[str] = None,
        steps: int = 500,
        batch_size: Optional[int] = None,
        lr: Optional[float] = None,
        seed: int = 0,
        ensemble: Optional[int] = None,
        stream: bool = False,
        force: bool = False,
        backbone: Optional[str] = None,
        embed_cache: Optional[str] = None,
        stop: Optional[str] = None,
    ) -> "Session": ...
    @property
    def state(self) -> "os.PathLike[str]": ...
    def query(
        self,
        n: int = 50,
        *,
        scorer: str = "entropy",
        out: Optional[str] = None,
        format: str = "csv",
        include_pending: bool = False,
        subsample: Optional[int] = None,
        stream: bool = False,
        settings: Optional[str] = None,
    ) -> List[Dict[str, object]]: ...
    def teach(
        self,
        answers: Optional[List[Tuple[str, str]]] = None,
        *,
        file: Optional[str] = None,
        stream: bool = False,
    ) -> int: ...
    def status_json(self) -> str: ...
