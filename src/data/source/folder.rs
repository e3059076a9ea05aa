//! Image folders, read as torchvision's `ImageFolder` reads them: every visible subfolder of
//! the folder is a class (empty ones included, names sorted), and every PNG, JPEG or WebP
//! image anywhere below it, however deeply nested, carries that class; images at the top of
//! the folder are unlabeled. Ids are paths relative to the folder with `/` between the parts,
//! in sorted order, so a flat folder keeps the ids it always had. Hidden entries (names
//! starting with `.`) are skipped at every level; links are followed out of the tree, and a
//! link to a folder inside it, or to nothing, refuses the folder naming the link. A file in an image format alkit does not decode (GIF, BMP, TIFF, ...) refuses
//! the folder, naming it, rather than leave the image out; any other file (notes, metadata,
//! sidecars) is left out and named in one [`Event::LeftOut`] to the observer of a read.
//!
//! Images of one size up to [`MAX_SIDE_AS_IS`](crate::data::plan::MAX_SIDE_AS_IS)
//! are read as they are; otherwise each is scaled to [`FIT_SIDE`](crate::data::plan::FIT_SIDE)
//! on both sides (see
//! [`Image::preprocess`](crate::data::image::Image::preprocess) with
//! [`Preprocess::square`](crate::data::image::Preprocess::square)). A
//! [split folder](split_folder) holds a `train/` pool and a `test/` split.
//!
//! Both reads list the folder and read every header first (the plan of sizes and channels
//! needs them all); the whole read then decodes every image, a stream a chunk at a time,
//! holding the ids (paths), a few dozen bytes per item.

use crate::data::image::decode;
use crate::data::labels::check_class_count;
use crate::data::plan::{ImagePlan, PlanBuilder};
use crate::data::stream::{drain, Chunk, Format, ItemStream, Items, Listed, Loaded, PoolLabels};
use crate::error::{DataProblem, Error, Result};
use crate::hub::Hub;
use crate::observe::{check, Event, Observer};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// A folder of images (see the module docs).
pub(crate) struct Folder<'a>(pub(crate) &'a Path);

impl Format for Folder<'_> {
    fn name(&self) -> String {
        self.0.display().to_string()
    }

    fn labels_are_given(&self) -> bool {
        true
    }

    fn open(
        &self,
        _hub: &Hub,
        observer: &mut dyn Observer,
        plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>> {
        let folder = ImageFolder::list(self.0)?;
        folder.tell_left_out(observer)?;
        Ok(Box::new(FolderStream::of(folder).with(plan)))
    }

    fn load(
        &self,
        _hub: &Hub,
        observer: &mut dyn Observer,
        plan: Option<&ImagePlan>,
    ) -> Result<Loaded> {
        let dir = self.0;
        if split_folder(dir)? {
            return load_split_folder(dir, plan, observer);
        }
        // Not a split folder (asked above): listed as it is, without asking again.
        let folder = ImageFolder::list_plain(dir)?;
        folder.tell_left_out(observer)?;
        Ok(Loaded {
            pool: folder_items(folder.planned(plan))?,
            test: None,
        })
    }

    fn pool_labels(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<PoolLabels> {
        let folder = pool_listing(self.0)?;
        Ok(PoolLabels {
            labels: folder.labels,
            classes: folder.classes,
        })
    }

    fn load_test(&self, _hub: &Hub, _observer: &mut dyn Observer) -> Result<Option<Items>> {
        let dir = self.0;
        if !split_folder(dir)? {
            return Ok(None);
        }
        let train = ImageFolder::list_split(dir, "train")?;
        let shape = train.plan.item_shape();
        let test = folder_items(ImageFolder::list_split(dir, "test")?.planned(None))?;
        onto_train(dir, &train.classes, &shape, test).map(Some)
    }

    fn listed_labels(&self) -> Result<Option<Listed>> {
        let folder = pool_listing(self.0)?;
        let given = folder
            .ids
            .iter()
            .zip(&folder.labels)
            .filter_map(|(id, l)| l.map(|l| (id.clone(), folder.classes[l as usize].clone())))
            .collect();
        Ok(Some(Listed {
            classes: folder.classes,
            given,
        }))
    }
}

/// The extensions of the images alkit decodes (PNG, JPEG, WebP), lower case.
const IMAGE_EXTENSIONS: &[&str] = &["png", "jpg", "jpeg", "webp"];

/// Extensions of image formats Pillow (and so timm's loader) reads and alkit does not: a
/// folder holding one is refused, naming it, rather than read without it.
const OTHER_IMAGE_EXTENSIONS: &[&str] = &[
    "gif", "bmp", "tif", "tiff", "ppm", "pgm", "pbm", "pnm", "ico", "tga", "jp2", "avif", "heic",
    "heif", "jxl",
];

/// What a file of an image folder is, by its extension (the content is checked on decoding).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    /// A PNG, JPEG or WebP image.
    Image,
    /// An image in a format alkit does not decode.
    OtherImage,
    /// Not an image.
    Other,
}

fn file_kind(p: &Path) -> FileKind {
    let ext = p
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if IMAGE_EXTENSIONS.contains(&ext.as_str()) {
        FileKind::Image
    } else if OTHER_IMAGE_EXTENSIONS.contains(&ext.as_str()) {
        FileKind::OtherImage
    } else {
        FileKind::Other
    }
}

fn is_hidden(name: &str) -> bool {
    name.starts_with('.')
}

/// `names` as one line: the first few, then how many more.
fn few(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut line = names
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        line.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    line
}

/// The files of an image folder's tree, found by [`walk`].
#[derive(Default)]
struct Walk {
    /// Images with their class, ids relative to the folder.
    images: Vec<(String, Option<u32>)>,
    /// Images in formats alkit does not decode.
    unsupported: Vec<String>,
    /// Files that are not images.
    left_out: Vec<String>,
    /// Folders read (canonical paths), so a link back up is not followed round.
    seen: HashSet<PathBuf>,
    /// The folder's own canonical path: a link to a folder inside it is refused.
    root: PathBuf,
    /// Links that point to nothing.
    broken: Vec<String>,
    /// Links to a folder inside the tree, as `link -> target` (relative to the folder).
    inner: Vec<String>,
}

/// A folder's visible entries, sorted.
fn entries(d: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut v: Vec<(String, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(d).map_err(|e| Error::io(d, e))? {
        let p = e.map_err(|e| Error::io(d, e))?.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if !is_hidden(&name) {
            v.push((name, p));
        }
    }
    v.sort();
    Ok(v)
}

/// Every file below `dir` (whose id prefix is `prefix`, ending in `/`), sorted into `w`, each
/// image with `label`.
fn walk(dir: &Path, prefix: &str, label: Option<u32>, w: &mut Walk) -> Result<()> {
    let canonical = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
    if !w.seen.insert(canonical) {
        return Ok(());
    }
    for (name, p) in entries(dir)? {
        let id = format!("{prefix}{name}");
        let link = std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink());
        if link && !p.exists() {
            w.broken.push(id);
            continue;
        }
        if p.is_dir() {
            if link {
                // A link into the tree would read its images again, under this folder's class
                // (or stop them being read under their own): refused, not followed.
                let target = std::fs::canonicalize(&p).map_err(|e| Error::io(&p, e))?;
                if let Ok(rel) = target.strip_prefix(&w.root) {
                    w.inner.push(format!("{id} -> {}", rel.display()));
                    continue;
                }
            }
            walk(&p, &format!("{id}/"), label, w)?;
            continue;
        }
        match file_kind(&p) {
            FileKind::Image if p.is_file() => w.images.push((id, label)),
            FileKind::OtherImage => w.unsupported.push(id),
            _ => w.left_out.push(id),
        }
    }
    Ok(())
}

/// Every image of a listed folder decoded: its stream drained.
fn folder_items(mut folder: ImageFolder) -> Result<Items> {
    let labels = std::mem::take(&mut folder.labels);
    let classes = std::mem::take(&mut folder.classes);
    let mut stream = FolderStream::of(folder);
    let item_shape = stream.item_shape.clone();
    let (ids, x) = drain(&mut stream)?.map_or_else(Default::default, |c| (c.ids, c.x));
    Ok(Items {
        ids,
        x,
        item_shape,
        labels,
        classes,
    })
}

/// Whether `dir` is a split folder: no images at its top and exactly two visible subfolders,
/// `train` and `test` (the layout of Hugging Face's `imagefolder` and of many published image
/// sets), each holding one subfolder per class. Such a folder is a benchmark data set: its
/// pool is the train split, and `curve`, `train`, `ood` and `calibrate` evaluate on the test
/// split. A labeled folder whose only two classes are called `train` and `test` is read this
/// way too.
pub(crate) fn split_folder(dir: &Path) -> Result<bool> {
    let mut subfolders = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let p = e.map_err(|e| Error::io(dir, e))?.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if p.is_dir() && !name.starts_with('.') {
            subfolders.push(name);
        } else if p.is_file() && file_kind(&p) != FileKind::Other {
            return Ok(false);
        }
    }
    subfolders.sort();
    let has = |n: &str| subfolders.iter().any(|s| s == n);
    if has("train") && has("test") && subfolders.len() > 2 {
        // Read as classes, `train`, `test` and the rest would each hold only subfolders: no
        // images at all, and an error that would not say why.
        let others: Vec<&String> = subfolders
            .iter()
            .filter(|s| *s != "train" && *s != "test")
            .collect();
        return Err(Error::data(
            dir,
            DataProblem::Other(format!(
                "holds train/ and test/ beside {others:?}: a split folder holds only train/ and \
                 test/ (move the others out, or point at a folder of class subfolders)"
            )),
        ));
    }
    Ok(subfolders == ["test", "train"])
}

/// Both splits of a [split folder](split_folder), ids `train/CLASS/FILE` and `test/CLASS/FILE`,
/// classes those of `train/` (the test split may lack some, not add any) and one item shape in
/// both, or an error naming the folder.
fn load_split_folder(
    dir: &Path,
    plan: Option<&ImagePlan>,
    observer: &mut dyn Observer,
) -> Result<Loaded> {
    let mut read = |split: &str| {
        let folder = ImageFolder::list_split(dir, split)?;
        folder.tell_left_out(observer)?;
        folder_items(folder.planned(plan))
    };
    let pool = read("train")?;
    let test = read("test")?;
    let test = onto_train(dir, &pool.classes, &pool.item_shape, test)?;
    Ok(Loaded {
        pool,
        test: Some(test),
    })
}

/// A split folder's `test/` items with their labels mapped by name onto `train/`'s classes
/// (a class the test split lacks is fine, one the model never trains on is not).
fn onto_train(dir: &Path, classes: &[String], shape: &[usize], mut test: Items) -> Result<Items> {
    let problem = |what: String| Error::data(dir, DataProblem::Other(what));
    let mut to_train = Vec::with_capacity(test.classes.len());
    for name in &test.classes {
        match classes.iter().position(|c| c == name) {
            Some(c) => to_train.push(c as u32),
            None => {
                return Err(problem(format!(
                    "test/{name}/ is a class train/ does not have (train/ has {classes:?})"
                )))
            }
        }
    }
    for l in test.labels.iter_mut().flatten() {
        *l = to_train[*l as usize];
    }
    test.classes = classes.to_vec();
    if shape != test.item_shape {
        return Err(problem(format!(
            "train/ images are {shape:?}, test/ images {:?}",
            test.item_shape
        )));
    }
    Ok(test)
}

/// The listing of an image folder's pool: `train/` of a split folder, else the folder itself.
fn pool_listing(dir: &Path) -> Result<ImageFolder> {
    if split_folder(dir)? {
        ImageFolder::list_split(dir, "train")
    } else {
        ImageFolder::list_plain(dir)
    }
}

/// An image folder listed and its headers read, nothing decoded: what the whole read and a
/// streamed read share. Ids in sorted order; the file of id `i` is `dir/ids[i]`.
struct ImageFolder {
    dir: PathBuf,
    ids: Vec<String>,
    labels: Vec<Option<u32>>,
    classes: Vec<String>,
    plan: ImagePlan,
    /// Files that are not images, left out (ids relative to `dir`).
    left_out: Vec<String>,
}

impl Walk {
    /// Refuses a folder that holds links to nothing, links to a folder inside itself (its
    /// images would be read twice, or under another class), or images alkit does not decode,
    /// naming a few of each.
    fn refuse_what_is_not_read(&mut self, dir: &Path) -> Result<()> {
        if !self.broken.is_empty() {
            self.broken.sort();
            return Err(Error::data(
                dir,
                DataProblem::Other(format!(
                    "holds {} link(s) to nothing: {} (remove them or restore their targets)",
                    self.broken.len(),
                    few(&self.broken)
                )),
            ));
        }
        if !self.inner.is_empty() {
            self.inner.sort();
            return Err(Error::data(
                dir,
                DataProblem::Other(format!(
                    "holds {} link(s) to a folder inside itself: {} (its images would be read \
                 twice, or under another class: remove the links)",
                    self.inner.len(),
                    few(&self.inner)
                )),
            ));
        }
        if !self.unsupported.is_empty() {
            return Err(Error::data(
                dir,
                DataProblem::Other(format!(
                    "holds {} image(s) in a format alkit does not decode: {} (alkit reads PNG, \
                 JPEG and WebP: convert them, or move them out of the folder)",
                    self.unsupported.len(),
                    few(&self.unsupported)
                )),
            ));
        }
        Ok(())
    }
}

impl ImageFolder {
    /// Lists `dir` (see the module docs) and reads every image's header: the `train/`
    /// split of a [split folder](split_folder), ids prefixed with `train/`.
    fn list(dir: &Path) -> Result<ImageFolder> {
        match split_folder(dir)? {
            true => Self::list_split(dir, "train"),
            false => Self::list_plain(dir),
        }
    }

    /// Decoded by `plan` when given instead of the plan of its headers.
    fn planned(mut self, plan: Option<&ImagePlan>) -> ImageFolder {
        if let Some(p) = plan {
            self.plan = *p;
        }
        self
    }

    /// The `split` subfolder of a split folder, ids relative to `dir`.
    fn list_split(dir: &Path, split: &str) -> Result<ImageFolder> {
        let mut f = Self::list_plain(&dir.join(split))?;
        if f.labels.iter().any(Option::is_none) {
            return Err(Error::data(
                dir.join(split),
                DataProblem::Other(
                    "a split of a train/test folder holds its images in class subfolders only"
                        .into(),
                ),
            ));
        }
        f.ids = f.ids.iter().map(|id| format!("{split}/{id}")).collect();
        f.left_out = f
            .left_out
            .iter()
            .map(|id| format!("{split}/{id}"))
            .collect();
        f.dir = dir.to_path_buf();
        Ok(f)
    }

    fn list_plain(dir: &Path) -> Result<ImageFolder> {
        let top = entries(dir)?;
        // Every visible subfolder is a class, empty ones included: a person declares the class
        // list by creating the folders.
        let classes: Vec<String> = top
            .iter()
            .filter(|(_, p)| p.is_dir())
            .map(|(name, _)| name.clone())
            .collect();
        check_class_count(classes.len(), dir)?;
        let mut w = Walk::default();
        let canonical = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
        w.seen.insert(canonical.clone());
        w.root = canonical;
        for (name, p) in top.iter().filter(|(_, p)| !p.is_dir()) {
            let link = std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
            if link && !p.exists() {
                w.broken.push(name.clone());
                continue;
            }
            match file_kind(p) {
                FileKind::Image if p.is_file() => w.images.push((name.clone(), None)),
                FileKind::OtherImage => w.unsupported.push(name.clone()),
                _ => w.left_out.push(name.clone()),
            }
        }
        for (c, class) in classes.iter().enumerate() {
            let p = dir.join(class);
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
                let target = std::fs::canonicalize(&p).map_err(|e| Error::io(&p, e))?;
                if let Ok(rel) = target.strip_prefix(&w.root) {
                    w.inner.push(format!("{class} -> {}", rel.display()));
                    continue;
                }
            }
            walk(
                &dir.join(class),
                &format!("{class}/"),
                Some(c as u32),
                &mut w,
            )?;
        }
        w.unsupported.sort();
        w.left_out.sort();
        w.refuse_what_is_not_read(dir)?;
        let mut files = w.images;
        files.sort_by(|a, b| a.0.cmp(&b.0));
        if files.is_empty() {
            let others = match w.left_out.len() {
                0 => String::new(),
                n => format!(" ({n} other file(s): {})", few(&w.left_out)),
            };
            return Err(Error::data(
                dir,
                DataProblem::Other(format!("holds no .png/.jpg/.jpeg/.webp images{others}")),
            ));
        }
        // Headers first: a folder of photos of mixed (or large) sizes is scaled to one square
        // size as each image is decoded, so a full-size photo is never held beside the others.
        let mut plan = PlanBuilder::default();
        for (id, _) in &files {
            let p = dir.join(id);
            let bytes = std::fs::read(&p).map_err(|e| Error::io(&p, e))?;
            plan.add(crate::data::image::header(&bytes, &p)?);
        }
        let (ids, labels) = files.into_iter().unzip();
        Ok(ImageFolder {
            dir: dir.to_path_buf(),
            ids,
            labels,
            classes,
            plan: plan.plan(true),
            left_out: w.left_out,
        })
    }

    /// Tells `observer` of the files left out because they are not images, if any.
    fn tell_left_out(&self, observer: &mut dyn Observer) -> Result<()> {
        if self.left_out.is_empty() {
            return Ok(());
        }
        check(
            observer,
            &Event::LeftOut {
                source: &self.dir.display().to_string(),
                files: &self.left_out,
            },
        )
    }

    /// Images in the folder.
    fn len(&self) -> usize {
        self.ids.len()
    }

    /// Item `i` decoded `(c, h, w)` in `[0, 1]`.
    fn item(&self, i: usize) -> Result<Vec<f32>> {
        let p = self.dir.join(&self.ids[i]);
        let bytes = std::fs::read(&p).map_err(|e| Error::io(&p, e))?;
        self.plan.item(decode(&bytes, &p)?, &p)
    }
}

/// An image folder, decoded a chunk at a time.
struct FolderStream {
    folder: ImageFolder,
    item_shape: Vec<usize>,
    next: usize,
}

impl FolderStream {
    /// A listed folder's images, decoded by its plan.
    fn of(folder: ImageFolder) -> FolderStream {
        FolderStream {
            item_shape: folder.plan.item_shape(),
            folder,
            next: 0,
        }
    }
}

impl FolderStream {
    /// Every image decoded by `plan` when given (see [`Format::open`]).
    fn with(mut self, plan: Option<&ImagePlan>) -> FolderStream {
        if let Some(plan) = plan {
            self.folder.plan = *plan;
            self.item_shape = self.folder.plan.item_shape();
        }
        self
    }
}

impl ItemStream for FolderStream {
    fn len(&self) -> usize {
        self.folder.len()
    }

    fn item_shape(&self) -> &[usize] {
        &self.item_shape
    }

    fn next_chunk(&mut self, max: usize) -> Result<Option<Chunk>> {
        let n = self.folder.len();
        if self.next >= n || max == 0 {
            return Ok(None);
        }
        let (start, k) = (self.next, max.min(n - self.next));
        // Decoded and resized in parallel, an image per task, each straight into its place
        // (no second copy of the chunk); the first failure in folder order is the one
        // reported, as a sequential read would.
        use rayon::prelude::*;
        let len = self.folder.plan.item_len();
        let mut x = vec![0f32; k * len];
        let done: Vec<Result<()>> = x
            .par_chunks_mut(len.max(1))
            .zip(start..start + k)
            .map(|(dst, i)| {
                let item = self.folder.item(i)?;
                if item.len() != dst.len() {
                    let p = self.folder.dir.join(&self.folder.ids[i]);
                    return Err(Error::data(
                        &p,
                        DataProblem::Other(format!(
                            "decodes to {} values where the pool's items hold {}",
                            item.len(),
                            dst.len()
                        )),
                    ));
                }
                dst.copy_from_slice(&item);
                Ok(())
            })
            .collect();
        done.into_iter().collect::<Result<()>>()?;
        self.next += k;
        Ok(Some(Chunk {
            start,
            ids: self.folder.ids[start..start + k].to_vec(),
            x,
        }))
    }
}
