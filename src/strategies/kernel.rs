//! The regression batch rules' settings (Holzmüller et al. 2023's kernel, transform and mode)
//! as closed sets the command line and Python name; `kernel_batch` in the registry turns them
//! into an `alkit_acquisition::KernelBatch`.

use serde::{Deserialize, Serialize};
use std::str::FromStr;

named!(
    /// The base kernel of the regression batch rules.
    Kernel {
        /// Gradients of the predicted mean w.r.t. every linear layer (the paper's best).
        Grad => "grad",
        /// Gradients w.r.t. the last linear layer: the penultimate features with a 1.
        Ll => "ll",
    }
);

named!(
    /// Which rows a regression batch rule selects among.
    KernelMode {
        /// The pool alone (the paper's `-P`).
        P => "p",
        /// The labeled items first, then the pool (the paper's `-TP`).
        Tp => "tp",
    }
);

named!(
    /// The kernel transform before a regression batch rule.
    KernelTransform {
        /// None: the base kernel itself.
        None => "none",
        /// The Gaussian-process posterior given the labeled items (`train`), after scaling
        /// them to unit mean squared norm.
        Train => "train",
    }
);
