//! The last-layer Laplace settings (Kristiadi et al. 2020; Daxberger et al. 2021) as closed
//! sets the command line and Python name: the Hessian's structure, and where the sample
//! scorers draw from (MC dropout or the Laplace posterior); `la` and the sample scorers in the
//! registry turn them into `alkit_acquisition` requests.

use serde::{Deserialize, Serialize};
use std::str::FromStr;

named!(
    /// The structure of the last-layer Laplace posterior's Gauss-Newton matrix.
    LaplaceHessian {
        /// Its diagonal.
        Diag => "diag",
        /// Kronecker-factored (KFAC), weight and bias blocks apart.
        Kron => "kron",
        /// The whole matrix, for heads of at most 2,048 parameters.
        Full => "full",
    }
);

impl LaplaceHessian {
    /// The acquisition crate's structure.
    pub fn hessian(self) -> alkit_acquisition::Hessian {
        match self {
            LaplaceHessian::Diag => alkit_acquisition::Hessian::Diag,
            LaplaceHessian::Kron => alkit_acquisition::Hessian::Kron,
            LaplaceHessian::Full => alkit_acquisition::Hessian::Full,
        }
    }
}

named!(
    /// Where the sample scorers (BALD, BatchBALD, EPIG, ...) draw their predictions from in a
    /// run of one model (an ensemble's members otherwise).
    PosteriorKind {
        /// Forward passes with dropout on.
        McDropout => "mc-dropout",
        /// Weight draws of the last-layer Laplace posterior fitted on the labeled items.
        Laplace => "laplace",
        /// Dropout injected at test time before the last linear layer (Ledda et al. 2023).
        InsertedDropout => "inserted-dropout",
    }
);
