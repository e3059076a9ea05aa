//! Pools read in chunks: every source kind streams exactly the items its whole loader gives,
//! and a helper writes large synthetic pools (safetensors, Parquet, an image folder) for the
//! memory and scaling measurements of docs/sharding.md.

use super::*;
use alkit::data::image::{encode_png, write_image_folder};
use alkit::data::source::{self, load as load_source};
use alkit::hub::Hub;
use std::io::Read;

/// Writes a Hub-style Parquet table (`image` a struct with `bytes`, `label` int64), `group`
/// rows per row group, with the `parquet` crate's own writer.
pub(crate) fn write_parquet(path: &Path, rows: &[(Vec<u8>, i64)], group: usize) {
    write_parquet_groups(path, rows.chunks(group.max(1)).map(<[_]>::to_vec));
}

/// [`write_parquet`] with the row groups given one at a time.
fn write_parquet_groups(path: &Path, groups: impl Iterator<Item = Vec<(Vec<u8>, i64)>>) {
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;
    use std::sync::Arc;
    let schema = parse_message_type(
        "message schema { required group image { optional binary bytes; } required int64 label; }",
    )
    .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let props = Arc::new(WriterProperties::builder().build());
    let mut w = SerializedFileWriter::new(file, Arc::new(schema), props).unwrap();
    for part in groups {
        let mut rg = w.next_row_group().unwrap();
        let mut col = rg.next_column().unwrap().unwrap();
        let bytes: Vec<ByteArray> = part.iter().map(|r| ByteArray::from(r.0.clone())).collect();
        col.typed::<ByteArrayType>()
            .write_batch(&bytes, Some(&vec![1; part.len()]), None)
            .unwrap();
        col.close().unwrap();
        let mut col = rg.next_column().unwrap().unwrap();
        let labels: Vec<i64> = part.iter().map(|r| r.1).collect();
        col.typed::<Int64Type>()
            .write_batch(&labels, None, None)
            .unwrap();
        col.close().unwrap();
        rg.close().unwrap();
    }
    w.close().unwrap();
}

/// Every chunk of `src`'s stream, `chunk` items at a time, concatenated: (ids, x, item shape).
fn streamed(src: &Source, hub: &Hub, chunk: usize) -> (Vec<String>, Vec<f32>, Vec<usize>) {
    let mut st = source::open(src, hub, &mut Silent, None).unwrap();
    let shape = st.item_shape().to_vec();
    let n = st.len();
    let (mut ids, mut x) = (Vec::new(), Vec::new());
    while let Some(c) = st.next_chunk(chunk).unwrap() {
        assert_eq!(c.start, ids.len(), "{src}: chunks in order");
        assert!(c.ids.len() <= chunk && !c.ids.is_empty());
        ids.extend(c.ids);
        x.extend(c.x);
    }
    assert_eq!(ids.len(), n, "{src}: len() is the item count");
    (ids, x, shape)
}

fn assert_streams_as_loaded(src: &Source, hub: &Hub) {
    let whole = load_source(src, hub, &mut Silent, None).unwrap().pool;
    for chunk in [1, 7, 1000, 1 << 20] {
        let (ids, x, shape) = streamed(src, hub, chunk);
        assert_eq!(ids, whole.ids, "{src}, chunks of {chunk}: ids");
        assert_eq!(shape, whole.item_shape, "{src}, chunks of {chunk}: shape");
        // Bit for bit, not approximately.
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert!(bits(&x) == bits(&whole.x), "{src}, chunks of {chunk}: x");
    }
}

#[test]
fn every_source_kind_streams_exactly_the_items_it_loads() {
    let dir = tmp("stream-kinds");
    let hub = Hub::new(dir.join("nohub"), true);
    let (train, _) = shipped();
    let src = |p: &Path| Source::parse(&p.to_string_lossy()).unwrap();

    // IDX, gzip (the shipped folder) and plain.
    assert_streams_as_loaded(&src(&data_dir()), &hub);
    let plain = dir.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    for f in std::fs::read_dir(data_dir()).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|e| e == "gz") {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(std::fs::File::open(&p).unwrap())
                .read_to_end(&mut out)
                .unwrap();
            std::fs::write(plain.join(p.file_stem().unwrap()), out).unwrap();
        }
    }
    assert_streams_as_loaded(&src(&plain), &hub);

    // An image folder: labeled and unlabeled, one image RGB (so every gray one is promoted),
    // then one of another size (so every one is scaled to the fit side).
    let folder = dir.join("folder");
    let items: Vec<(usize, Option<String>)> = (0..40)
        .map(|i| (i, (i % 3 == 0).then(|| train.labels()[i].to_string())))
        .collect();
    write_image_folder(&folder, &train, &items).unwrap();
    assert_streams_as_loaded(&src(&folder), &hub);
    let rgb: Vec<f32> = (0..3 * 28 * 28).map(|i| (i % 251) as f32 / 255.0).collect();
    std::fs::write(
        folder.join("rgb.png"),
        encode_png(&rgb, &[3, 28, 28]).unwrap(),
    )
    .unwrap();
    assert_streams_as_loaded(&src(&folder), &hub);
    let big: Vec<f32> = (0..40 * 30).map(|i| (i % 7) as f32 / 7.0).collect();
    std::fs::write(
        folder.join("big.png"),
        encode_png(&big, &[1, 40, 30]).unwrap(),
    )
    .unwrap();
    let whole = load_source(&src(&folder), &hub, &mut Silent, None)
        .unwrap()
        .pool;
    assert_eq!(whole.item_shape, vec![3, 64, 64]);
    assert_streams_as_loaded(&src(&folder), &hub);

    // safetensors.
    let st = dir.join("pool.safetensors");
    super::shards::safetensors_pool(&st);
    assert_streams_as_loaded(&src(&st), &hub);

    // Parquet: the pyarrow fixture (one row group), and ours with row groups of 13 rows.
    let fx = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hub-mnist");
    assert_streams_as_loaded(&src(&fx.join("train-00000-of-00001.parquet")), &hub);
    let rows: Vec<(Vec<u8>, i64)> = (0..100)
        .map(|i| {
            let png = encode_png(train.item(i), train.item_shape()).unwrap();
            (png, i64::from(train.labels()[i]))
        })
        .collect();
    let pq = dir.join("groups.parquet");
    write_parquet(&pq, &rows, 13);
    assert_streams_as_loaded(&src(&pq), &hub);
    // A Hub dataset of two train shards: ids run on across them.
    let (a, b) = (dir.join("a.parquet"), dir.join("b.parquet"));
    write_parquet(&a, &rows[..60], 25);
    write_parquet(&b, &rows[60..], 25);
    let cache = dir.join("hub");
    fake_hub_cache(
        &cache,
        "datasets--me--two",
        &[("data/train-0.parquet", a), ("data/train-1.parquet", b)],
    );
    let hub2 = Hub::new(&cache, true);
    let (ids, x, _) = streamed(&Source::parse("hf:me/two").unwrap(), &hub2, 7);
    assert_eq!(ids.len(), 100);
    assert_streams_as_loaded(&Source::parse("hf:me/two").unwrap(), &hub2);
    let whole = load_source(&src(&pq), &hub, &mut Silent, None)
        .unwrap()
        .pool;
    assert!(x == whole.x, "two shards stream the one table's pixels");

    // CSV: an id and a label column, quoting, a blank line.
    let csv = dir.join("pool.csv");
    let mut text = String::from("\u{feff}id,f1,label,f2\n");
    for i in 0..50 {
        text.push_str(&format!(
            "\"it,{i}\",{}.5,{},{}\n",
            i,
            ["a", "b", ""][i % 3],
            -(i as i64)
        ));
        if i == 20 {
            text.push('\n');
        }
    }
    std::fs::write(&csv, &text).unwrap();
    assert_streams_as_loaded(&src(&csv), &hub);
    // Without an id column ids are row positions.
    std::fs::write(&csv, "f1,f2\n1,2\n3,4\n\n5,6\n").unwrap();
    assert_streams_as_loaded(&src(&csv), &hub);
}

#[test]
fn a_stream_refuses_what_the_loader_refuses_naming_the_same_place() {
    let dir = tmp("stream-bad");
    let hub = Hub::new(dir.join("nohub"), true);
    let src = |p: &Path| Source::parse(&p.to_string_lossy()).unwrap();
    // Reads every chunk; the first error.
    let stream_error = |s: &Source| -> String {
        match source::open(s, &hub, &mut Silent, None) {
            Err(e) => e.to_string(),
            Ok(mut st) => loop {
                match st.next_chunk(3) {
                    Err(e) => break e.to_string(),
                    Ok(None) => panic!("{s}: streamed without an error"),
                    Ok(Some(_)) => {}
                }
            },
        }
    };
    let same = |s: &Source| {
        let whole = load_source(s, &hub, &mut Silent, None)
            .unwrap_err()
            .to_string();
        assert_eq!(stream_error(s), whole, "{s}");
    };
    let csv = dir.join("bad.csv");
    for (i, text) in [
        "id,f\na,1\nb,x\n",
        "id,f\na,1\n\n\na,2\n",
        "id,f\na,1\n,2\n",
        "id,f\na,1\nb,2,3\n",
        "id,f,label\na,1,x\nb,zz,y\nc,3\n",
        "label\nx\n",
        "",
        "f\n1\ninf\n",
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(&csv, text).unwrap();
        let s = src(&csv);
        same(&s);
        let e = stream_error(&s);
        assert!(e.contains("bad.csv"), "case {i}: {e}");
    }
    // An IDX file cut short: the truncation is found once the reading reaches it.
    let idx = dir.join("idx");
    write_idx_dir(&idx, (5, 4, 4), &[0, 1, 2, 0, 1], (2, 4, 4), &[1, 2]);
    let images = idx.join("train-images-idx3-ubyte.gz");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&images).unwrap())
        .read_to_end(&mut raw)
        .unwrap();
    std::fs::remove_file(&images).unwrap();
    write_gz(
        &idx.join("train-images-idx3-ubyte.gz"),
        &raw[..raw.len() - 20],
    )
    .unwrap();
    same(&src(&idx));
    // A label that skips a class.
    write_idx_dir(&idx, (5, 4, 4), &[0, 1, 3, 0, 1], (2, 4, 4), &[1, 0]);
    same(&src(&idx));
    // A Parquet row whose label skips a class, one whose image is not an image.
    let (train, _) = shipped();
    let png = |i: usize| encode_png(train.item(i), train.item_shape()).unwrap();
    let pq = dir.join("bad.parquet");
    write_parquet(
        &pq,
        &[(png(0), 0), (png(1), 2), (png(2), 1), (png(3), 5)],
        2,
    );
    same(&src(&pq));
    write_parquet(
        &pq,
        &[(png(0), 0), (png(1), 1), (b"not an image".to_vec(), 1)],
        2,
    );
    same(&src(&pq));
}

/// Writes a synthetic pool of `ALKIT_POOL_N` (default 1,000,000) MNIST-shaped items into
/// `ALKIT_POOL_DIR` as `pool.safetensors` (x u8 `(n, 28, 28)`), `pool.parquet` (PNG bytes,
/// 10,000 rows per row group) and, with `ALKIT_POOL_FOLDER=1`, an image folder `images/`.
/// Item `i` is shipped training image `i mod 2000` with 8% of its pixels replaced by noise
/// drawn from a seeded stream, so no two items are alike. Run:
/// `ALKIT_POOL_DIR=/tmp/pool cargo test --release --test alkit write_a_synthetic_pool -- --ignored`
#[test]
#[ignore = "writes a large pool for the measurements in docs/sharding.md"]
fn write_a_synthetic_pool() {
    use rand::Rng;
    let n: usize = std::env::var("ALKIT_POOL_N").map_or(1_000_000, |v| v.parse().unwrap());
    let dir = PathBuf::from(std::env::var("ALKIT_POOL_DIR").expect("ALKIT_POOL_DIR"));
    let folder = std::env::var("ALKIT_POOL_FOLDER").is_ok_and(|v| v == "1");
    std::fs::create_dir_all(&dir).unwrap();
    let (train, _) = shipped();
    let mut rng = stream(7, Purpose::Select, n as u64);
    let mut x = Vec::with_capacity(n * 784);
    for i in 0..n {
        let base = train.item(i % train.len());
        for &v in base {
            let p = if rng.random::<f32>() < 0.08 {
                rng.random::<u8>()
            } else {
                (v * 255.0).round() as u8
            };
            x.push(p);
        }
    }
    // safetensors, written as the format says: an 8-byte header size, the JSON header, data.
    let header = serde_json::json!({"x": {"dtype": "U8", "shape": [n, 28, 28],
        "data_offsets": [0, x.len()]}})
    .to_string();
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(dir.join("pool.safetensors")).unwrap());
    use std::io::Write;
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(header.as_bytes()).unwrap();
    f.write_all(&x).unwrap();
    f.flush().unwrap();
    drop(f);
    let png = |i: usize| {
        let item: Vec<f32> = x[i * 784..(i + 1) * 784]
            .iter()
            .map(|&b| f32::from(b) / 255.0)
            .collect();
        encode_png(&item, &[1, 28, 28]).unwrap()
    };
    // Parquet, one row group at a time so the writer's memory stays small.
    let label = |i: usize| i64::from(train.labels()[i % train.len()]);
    write_parquet_groups(
        &dir.join("pool.parquet"),
        (0..n).step_by(10_000).map(|s| {
            (s..(s + 10_000).min(n))
                .map(|i| (png(i), label(i)))
                .collect()
        }),
    );
    if folder {
        let images = dir.join("images");
        std::fs::create_dir_all(&images).unwrap();
        for i in 0..n {
            std::fs::write(images.join(format!("{i:07}.png")), png(i)).unwrap();
        }
    }
}
