//! PyTorch weight files (`torch.save`): pickles that lie or try to run code.

use super::*;

pub(super) fn cases() -> Vec<Case> {
    vec![
        case!(
            "pt-truncated-zip",
            |d, fx| {
                let b = torch_fixture("state_dict.pth");
                ck_with_bin(d, fx, &b[..b.len() / 2]);
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/pytorch_model.bin", "zip"]
        ),
        case!(
            "pt-legacy-truncated",
            |d, fx| {
                let b = torch_fixture("legacy.pth");
                ck_with_bin(d, fx, &b[..b.len() - 9]);
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/pytorch_model.bin", "cut short"]
        ),
        case!(
            "pt-global-not-a-tensor",
            |d, fx| {
                let mut p = vec![0x80, 2, b'}'];
                p.extend(pkl_str("fc1.weight"));
                p.extend_from_slice(b"cos\nsystem\n");
                p.extend(pkl_str("touch pwned"));
                p.extend_from_slice(&[0x85, b'R', b's', b'.']);
                ck_with_bin(d, fx, &torch_zip(&p, &[]));
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            [
                "ck/pytorch_model.bin",
                "`fc1.weight` is a `os.system`, not a tensor"
            ]
        ),
        case!(
            "pt-storage-of-2^40-floats",
            |d, fx| {
                let p = pkl_one_tensor("fc1.weight", 1 << 40, 0, 1 << 40);
                ck_with_bin(d, fx, &torch_zip(&p, &[("0", &[0; 16])]));
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            [
                "ck/pytorch_model.bin",
                "`fc1.weight`",
                "declares 1099511627776 elements"
            ]
        ),
        case!(
            "pt-view-past-its-storage",
            |d, fx| {
                let p = pkl_one_tensor("fc1.weight", 4, 2, 4);
                ck_with_bin(d, fx, &torch_zip(&p, &[("0", &[0; 16])]));
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            [
                "ck/pytorch_model.bin",
                "`fc1.weight`",
                "reaches past its storage"
            ]
        ),
        case!(
            "pt-memo-doubling",
            |d, fx| {
                // Each step makes a pair of the previous object twice: 2^60 leaves if copied.
                let mut p = vec![0x80, 2, b']', b'q', 0];
                for _ in 0..60 {
                    p.extend_from_slice(&[b'h', 0, b'h', 0, 0x86, b'q', 0]);
                }
                p.push(b'.');
                ck_with_bin(d, fx, &torch_zip(&p, &[]));
            },
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            ["ck/pytorch_model.bin", "neither a state dict"]
        ),
        case!(
            "pt-whole-model",
            |d, fx| ck_with_bin(d, fx, &torch_fixture("whole_model.pth")),
            ["score", "--checkpoint", "{d}/ck", "--out", "{d}/s.csv"],
            1,
            [
                "ck/pytorch_model.bin",
                "whole pickled model (`__main__.Mlp`)",
                "torch.save(model.state_dict()"
            ]
        ),
        case!(
            "pt-pth-without-config",
            |d, _| std::fs::write(d.join("x.pth"), torch_fixture("state_dict.pth")).unwrap(),
            ["score", "--checkpoint", "{d}/x.pth", "--out", "{d}/s.csv"],
            1,
            [
                "x.pth",
                "PyTorch weights file",
                "config.json",
                "\"architecture\""
            ]
        ),
    ]
}
