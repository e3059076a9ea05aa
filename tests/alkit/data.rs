//! Data sources: IDX files (plain and gzip) and normalisation.

use super::*;

// ------------------------------------------------------------------------------------ data

#[test]
fn shipped_subset_loads_with_expected_counts() {
    // data/README.md: 2,000 train and 500 test items, 28x28, 10 classes.
    let s = load_idx_dir(&data_dir()).unwrap();
    assert_eq!((s.train.len(), s.test.len()), (2000, 500));
    assert_eq!(s.train.item_shape(), &[1, 28, 28]);
    assert_eq!(s.train.classes(), 10);
    assert!(s.train.features().iter().all(|v| (0.0..=1.0).contains(v)));
}

#[test]
fn idx_plain_and_gzip_read_alike_and_errors_name_the_file() {
    let dir = tmp("idx");
    write_idx_dir(&dir, (3, 4, 5), &[0, 1, 2], (2, 4, 5), &[2, 0]);
    let s = load_idx_dir(&dir).unwrap();
    assert_eq!((s.train.len(), s.test.len(), s.train.classes()), (3, 2, 3));
    assert_eq!(s.test.item(1)[0], 9.0 / 255.0);

    // Label count != image count.
    write_idx_dir(&dir, (3, 4, 5), &[0, 1], (2, 4, 5), &[0, 1]);
    let (path, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert!(path.ends_with("train-labels-idx1-ubyte.gz"));
    assert_eq!(
        p,
        DataProblem::CountMismatch {
            images: 3,
            labels: 2
        }
    );

    // The two splits together declare the classes: a test label of 3 beside train's 0..=2 is
    // a fourth class; a stray 5 skips 3 and 4 and is named, in whichever file holds it.
    write_idx_dir(&dir, (3, 4, 5), &[0, 1, 2], (2, 4, 5), &[0, 3]);
    assert_eq!(load_idx_dir(&dir).unwrap().test.classes(), 4);
    write_idx_dir(&dir, (3, 4, 5), &[0, 1, 2], (2, 4, 5), &[0, 5]);
    let (path, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert!(path.ends_with("t10k-labels-idx1-ubyte"), "{path:?}");
    assert!(
        matches!(&p, DataProblem::Other(m) if m.contains("label 5 at item 1 skips class 3")),
        "{p:?}"
    );
    write_idx_dir(&dir, (3, 4, 5), &[0, 255, 1], (2, 4, 5), &[0, 1]);
    let (path, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert!(path.ends_with("train-labels-idx1-ubyte.gz"), "{path:?}");
    assert!(
        matches!(&p, DataProblem::Other(m) if m.contains("label 255 at item 1 skips class 2")),
        "{p:?}"
    );

    // Test images of another size.
    write_idx_dir(&dir, (3, 4, 5), &[0, 1, 2], (2, 5, 5), &[0, 1]);
    let (_, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert_eq!(
        p,
        DataProblem::DimensionMismatch {
            expected: (4, 5),
            got: (5, 5)
        }
    );

    // Bad magic: a label file where an image file belongs.
    write_idx_dir(&dir, (3, 4, 5), &[0, 1, 2], (2, 4, 5), &[0, 1]);
    std::fs::write(dir.join("t10k-images-idx3-ubyte"), encode_labels(&[1, 2])).unwrap();
    let (path, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert!(path.ends_with("t10k-images-idx3-ubyte"));
    assert!(
        matches!(
            p,
            DataProblem::BadMagic {
                found: 0x801,
                expected: 0x803,
                ..
            }
        ),
        "{p:?}"
    );

    // Truncated: header promises 2*4*5 = 40 bytes, 30 present.
    let mut bytes = encode_images(&[0; 40], 2, 4, 5);
    bytes.truncate(16 + 30);
    std::fs::write(dir.join("t10k-images-idx3-ubyte"), bytes).unwrap();
    let (_, p) = data_problem(load_idx_dir(&dir).unwrap_err());
    assert_eq!(
        p,
        DataProblem::Truncated {
            expected: 40,
            got: 30
        }
    );

    // A missing folder is an IO error naming the file looked for.
    let e = load_idx_dir(&dir.join("nope")).unwrap_err();
    assert!(e.to_string().contains("train-images-idx3-ubyte"), "{e}");
}

#[test]
fn normalisation_uses_training_statistics_only() {
    // Two 1x1x2 train items [0, 2] and [4, 6]: mean 3, population std sqrt(5).
    let train = Dataset::new(vec![0.0, 2.0, 4.0, 6.0], vec![0, 1], vec![1, 1, 2], 2).unwrap();
    let test = Dataset::new(vec![3.0, 8.0], vec![0], vec![1, 1, 2], 2).unwrap();
    let n = Normalizer::fit(&train);
    assert!((n.mean[0] - 3.0).abs() < 1e-6 && (n.std[0] - 5f32.sqrt()).abs() < 1e-6);
    let t = n.apply(&test).unwrap();
    assert!(t.item(0)[0].abs() < 1e-6);
    assert!((t.item(0)[1] - 5.0 / 5f32.sqrt()).abs() < 1e-5);
}
