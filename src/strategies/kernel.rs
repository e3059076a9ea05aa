//! The regression batch rules' settings (Holzmüller et al. 2023's kernel, transform and mode)
//! as closed sets the command line and Python name, and how they set up a [`KernelBatch`].

use super::ScorerSettings;
use alkit_acquisition::{BaseKernel, FeatureRequest, KernelBatch, KernelRule};
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// Declares a closed set of named settings with its `FromStr` and `Display`.
macro_rules! named {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident => $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $s)] $v),+ }

        impl $name {
            /// The name users type.
            pub fn name(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> std::result::Result<Self, String> {
                [$($name::$v),+].into_iter().find(|k| k.name() == s).ok_or_else(|| {
                    let known: Vec<&str> = [$($s),+].to_vec();
                    format!("unknown {} `{s}`; expected one of: {}", stringify!($name), known.join(", "))
                })
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

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

/// `rule` with the paper's recommended combination, then the settings `s` gives.
pub(super) fn kernel_batch(s: &ScorerSettings, rule: KernelRule) -> KernelBatch {
    let paper = KernelBatch::paper(rule);
    let sigma = s.kernel_sigma.unwrap_or(KernelBatch::SIGMA);
    let base = match s.kernel.unwrap_or(Kernel::Grad) {
        Kernel::Grad => BaseKernel::Grad,
        Kernel::Ll => BaseKernel::LastLayer,
    };
    let sketch = match s.sketch {
        Some(0) => None,
        Some(p) => Some(p),
        None => FeatureRequest::PAPER.sketch,
    };
    let posterior = match s.kernel_transform {
        Some(KernelTransform::Train) => Some(sigma),
        Some(KernelTransform::None) => None,
        None => paper.posterior.map(|_| sigma),
    };
    KernelBatch {
        rule,
        request: FeatureRequest { base, sketch },
        with_labeled: s
            .kernel_mode
            .map_or(paper.with_labeled, |m| m == KernelMode::Tp),
        posterior,
        noise: sigma,
    }
}
