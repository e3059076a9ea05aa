//! Image folders: PNG/JPEG images at the top of a folder are unlabeled, those in `CLASS/`
//! subfolders carry the label `CLASS`; other files are ignored. Class names are the names of the
//! (visible) subfolders, sorted, empty ones included; ids are paths relative to the folder, in
//! sorted order. Images of one size up to [`MAX_SIDE_AS_IS`](crate::data::plan::MAX_SIDE_AS_IS)
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
use crate::observe::Observer;
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
        _observer: &mut dyn Observer,
        plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>> {
        Ok(Box::new(FolderStream::open(self.0)?.with(plan)))
    }

    fn load(
        &self,
        _hub: &Hub,
        _observer: &mut dyn Observer,
        plan: Option<&ImagePlan>,
    ) -> Result<Loaded> {
        let dir = self.0;
        if split_folder(dir)? {
            return load_split_folder(dir, plan);
        }
        // Not a split folder (asked above): listed as it is, without asking again.
        Ok(Loaded {
            pool: folder_items(ImageFolder::list_plain(dir)?.planned(plan))?,
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

fn is_image(p: &Path) -> bool {
    p.extension()
        .map(|e| {
            matches!(
                e.to_string_lossy().to_ascii_lowercase().as_str(),
                "png" | "jpg" | "jpeg"
            )
        })
        .unwrap_or(false)
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
        } else if p.is_file() && is_image(&p) {
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
fn load_split_folder(dir: &Path, plan: Option<&ImagePlan>) -> Result<Loaded> {
    let read = |split: &str| folder_items(ImageFolder::list_split(dir, split)?.planned(plan));
    let pool = read("train")?;
    let test = onto_train(dir, &pool.classes, &pool.item_shape, read("test")?)?;
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
        f.dir = dir.to_path_buf();
        Ok(f)
    }

    fn list_plain(dir: &Path) -> Result<ImageFolder> {
        let read = |d: &Path| -> Result<Vec<PathBuf>> {
            let mut v: Vec<PathBuf> = std::fs::read_dir(d)
                .map_err(|e| Error::io(d, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            v.sort();
            Ok(v)
        };
        let entries = read(dir)?;
        // Every visible subfolder is a class, empty ones included: a person declares the class
        // list by creating the folders.
        let classes: Vec<String> = entries
            .iter()
            .filter(|p| p.is_dir())
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| !n.starts_with('.'))
            .collect();
        check_class_count(classes.len(), dir)?;
        let mut files: Vec<(String, Option<u32>)> = Vec::new();
        for p in entries.iter().filter(|p| p.is_file() && is_image(p)) {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            files.push((name.into_owned(), None));
        }
        for (c, class) in classes.iter().enumerate() {
            for p in read(&dir.join(class))?
                .into_iter()
                .filter(|p| p.is_file() && is_image(p))
            {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                files.push((format!("{class}/{name}"), Some(c as u32)));
            }
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        if files.is_empty() {
            return Err(Error::data(
                dir,
                DataProblem::Other("holds no .png/.jpg/.jpeg images".into()),
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
        })
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
    /// Lists `dir` and reads every image's header (see the module docs).
    fn open(dir: &Path) -> Result<FolderStream> {
        ImageFolder::list(dir).map(FolderStream::of)
    }

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
        let mut x = Vec::with_capacity(k * self.folder.plan.item_len());
        for i in start..start + k {
            x.extend(self.folder.item(i)?);
        }
        self.next += k;
        Ok(Some(Chunk {
            start,
            ids: self.folder.ids[start..start + k].to_vec(),
            x,
        }))
    }
}
