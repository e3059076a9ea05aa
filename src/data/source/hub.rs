//! Hub datasets (`hf:OWNER/NAME[@REV]`): the `*train*` and `*test*` Parquet shards `datasets`
//! publishes, read as [Parquet](super::parquet) with the class names of the dataset card (or,
//! when the first train shard's schema has a list column, as one
//! [table of embeddings](super::parquet_embeddings) across the shards), or the four IDX files
//! anywhere in the repository, read as an [IDX folder](super::idx). Files are fetched into the
//! Hub cache when missing.

use super::idx::{Idx, IDX_FILES};
use super::parquet::{ParquetPool, ParquetStream};
use super::parquet_embeddings::{first_dim, is_embedding_table, EmbeddingTable};
use super::safetensors::check_test_split;
use crate::data::plan::ImagePlan;
use crate::data::stream::{Format, ItemStream, Items, Loaded, PoolLabels};
use crate::error::{Error, Result};
use crate::hub::{Hub, HubRepo, RepoKind};
use crate::observe::Observer;
use std::path::{Path, PathBuf};

/// A dataset repository on the Hub.
pub(crate) struct HubDataset<'a>(pub(crate) &'a HubRepo);

impl HubDataset<'_> {
    /// The shards `files` (repository paths) fetched, as local paths.
    fn fetch(
        &self,
        files: &[String],
        hub: &Hub,
        observer: &mut dyn Observer,
    ) -> Result<Vec<PathBuf>> {
        files
            .iter()
            .map(|f| hub.get(self.0, RepoKind::Dataset, f, observer))
            .collect()
    }

    /// The shards `paths` (fetched, at least one) as one table of embeddings, when the first
    /// one's schema makes it one; `None` for image tables.
    fn embeddings(
        &self,
        paths: &[PathBuf],
        classes: Option<Vec<String>>,
    ) -> Result<Option<EmbeddingTable>> {
        match paths.first() {
            Some(first) if is_embedding_table(first)? => {
                let name = PathBuf::from(self.0.to_string());
                EmbeddingTable::open_files(paths, classes, &name).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The test split of a dataset of embeddings, its shards `paths` (fetched) checked against
    /// the pool's dimension; `None` when it has no test shard.
    fn embedding_test(
        &self,
        pool_shape: &[usize],
        paths: &[PathBuf],
        classes: Option<Vec<String>>,
    ) -> Result<Option<Items>> {
        if paths.is_empty() {
            return Ok(None);
        }
        let name = PathBuf::from(self.0.to_string());
        let Some(table) = self.embeddings(paths, classes)? else {
            return Err(Error::data(
                &name,
                crate::error::DataProblem::Other(
                    "its train shards hold embeddings, its test shards do not".into(),
                ),
            ));
        };
        let test = table.items()?;
        let pool = Items {
            ids: Vec::new(),
            x: Vec::new(),
            item_shape: pool_shape.to_vec(),
            labels: Vec::new(),
            classes: Vec::new(),
        };
        check_test_split(&pool, &test, "column", ("features", "label"), &name)?;
        Ok(Some(test))
    }
}

impl Format for HubDataset<'_> {
    fn name(&self) -> String {
        self.0.to_string()
    }

    fn open(
        &self,
        hub: &Hub,
        observer: &mut dyn Observer,
        plan: Option<&ImagePlan>,
    ) -> Result<Box<dyn ItemStream>> {
        match hub_layout(self.0, hub, observer)? {
            HubLayout::Idx(dir) => Idx(&dir).open(hub, observer, plan),
            HubLayout::Parquet { train, classes, .. } => {
                let paths = self.fetch(&train, hub, observer)?;
                if let Some(table) = self.embeddings(&paths, classes.clone())? {
                    return Ok(Box::new(table));
                }
                Ok(Box::new(
                    ParquetStream::open(paths, classes, &PathBuf::from(self.0.to_string()))?
                        .with(plan),
                ))
            }
        }
    }

    fn load(
        &self,
        hub: &Hub,
        observer: &mut dyn Observer,
        plan: Option<&ImagePlan>,
    ) -> Result<Loaded> {
        match hub_layout(self.0, hub, observer)? {
            HubLayout::Parquet {
                train,
                test,
                classes,
            } => {
                let name = PathBuf::from(self.0.to_string());
                let train = self.fetch(&train, hub, observer)?;
                let test = self.fetch(&test, hub, observer)?;
                if let Some(table) = self.embeddings(&train, classes.clone())? {
                    let pool = table.items()?;
                    let test = self.embedding_test(&pool.item_shape, &test, classes)?;
                    return Ok(Loaded { pool, test });
                }
                let read = |paths: Vec<PathBuf>| -> Result<Option<Items>> {
                    if paths.is_empty() {
                        return Ok(None);
                    }
                    ParquetPool::scan(paths, classes.clone(), &name, true)?
                        .planned(plan)
                        .items()
                        .map(Some)
                };
                let pool = read(train)?.expect("non-empty");
                let test = read(test)?;
                Ok(Loaded { pool, test })
            }
            HubLayout::Idx(dir) => Idx(&dir).load(hub, observer, None),
        }
    }

    fn pool_labels(&self, hub: &Hub, observer: &mut dyn Observer) -> Result<PoolLabels> {
        match hub_layout(self.0, hub, observer)? {
            HubLayout::Parquet { train, classes, .. } => {
                let paths = self.fetch(&train, hub, observer)?;
                if let Some(table) = self.embeddings(&paths, classes.clone())? {
                    return Ok(table.pool_labels());
                }
                let name = PathBuf::from(self.0.to_string());
                ParquetPool::scan(paths, classes, &name, true).map(ParquetPool::labels)
            }
            HubLayout::Idx(dir) => Idx(&dir).pool_labels(hub, observer),
        }
    }

    fn load_test(&self, hub: &Hub, observer: &mut dyn Observer) -> Result<Option<Items>> {
        match hub_layout(self.0, hub, observer)? {
            HubLayout::Parquet {
                train,
                test,
                classes,
            } if !test.is_empty() => {
                let paths = self.fetch(&test, hub, observer)?;
                // A dataset of embeddings: the pool's dimension from its first train row.
                if is_embedding_table(&paths[0])? {
                    let first = self.fetch(&train[..1], hub, observer)?;
                    return self.embedding_test(&[first_dim(&first[0])?], &paths, classes);
                }
                let name = PathBuf::from(self.0.to_string());
                ParquetPool::scan(paths, classes, &name, true)?
                    .items()
                    .map(Some)
            }
            HubLayout::Parquet { .. } => Ok(None),
            HubLayout::Idx(dir) => Idx(&dir).load_test(hub, observer),
        }
    }
}

/// Class names from a dataset card (`README.md`) written by `datasets`: the lines
/// `'0': name` under `class_label:` / `names:` in the YAML front matter.
fn card_classes(readme: &str) -> Option<Vec<String>> {
    let front = readme.strip_prefix("---")?.split("\n---").next()?;
    let mut names: Vec<(usize, String)> = Vec::new();
    let mut inside = false;
    for line in front.lines() {
        let t = line.trim();
        if t == "names:" {
            inside = true;
            continue;
        }
        if inside {
            let parsed = t.split_once(':').and_then(|(k, v)| {
                let k = k.trim().trim_matches(|c| c == '\'' || c == '"');
                Some((
                    k.parse::<usize>().ok()?,
                    v.trim().trim_matches(|c| c == '\'' || c == '"').to_string(),
                ))
            });
            match parsed {
                Some(p) => names.push(p),
                None if names.is_empty() => inside = false,
                None => break,
            }
        }
    }
    names.sort();
    let ok = !names.is_empty() && names.iter().enumerate().all(|(i, (k, _))| i == *k);
    ok.then(|| names.into_iter().map(|(_, v)| v).collect())
}

/// What a Hub dataset holds: Parquet shards whose path contains `train` / `test` (the layout
/// `datasets` publishes, e.g. `ylecun/mnist`: `mnist/train-00000-of-00001.parquet`) with the
/// class names of its card, or the four IDX files anywhere in the repository (fetched, in one
/// folder of the cache).
enum HubLayout {
    /// Parquet shards of each split (repository paths, not fetched yet).
    Parquet {
        train: Vec<String>,
        test: Vec<String>,
        classes: Option<Vec<String>>,
    },
    /// The folder of the four IDX files.
    Idx(PathBuf),
}

/// Reads a Hub dataset's file list (and its card, or its IDX files) to find its [`HubLayout`].
fn hub_layout(repo: &HubRepo, hub: &Hub, observer: &mut dyn Observer) -> Result<HubLayout> {
    let files = hub.files(repo, RepoKind::Dataset)?;
    let split_of = |f: &str, split: &str| {
        let name = f.rsplit('/').next().unwrap_or(f);
        f.ends_with(".parquet") && (name.starts_with(split) || f.contains(&format!("/{split}/")))
    };
    let of = |split: &str| -> Vec<String> {
        files
            .iter()
            .filter(|f| split_of(f, split))
            .cloned()
            .collect()
    };
    let train = of("train");
    if !train.is_empty() {
        let classes = match files.iter().find(|f| *f == "README.md") {
            Some(f) => {
                let p = hub.get(repo, RepoKind::Dataset, f, observer)?;
                let text = std::fs::read_to_string(&p).map_err(|e| Error::io(&p, e))?;
                card_classes(&text)
            }
            None => None,
        };
        return Ok(HubLayout::Parquet {
            train,
            test: of("test"),
            classes,
        });
    }
    let mut dir: Option<PathBuf> = None;
    for stem in IDX_FILES {
        let f = files
            .iter()
            .find(|f| {
                let name = f.rsplit('/').next().unwrap_or(f);
                name == stem || name == format!("{stem}.gz")
            })
            .ok_or_else(|| Error::Hub {
                repo: repo.to_string(),
                cache: hub.cache_dir().to_path_buf(),
                problem: "holds neither train/test Parquet shards nor the four IDX files".into(),
            })?;
        let p = hub.get(repo, RepoKind::Dataset, f, observer)?;
        dir = p.parent().map(Path::to_path_buf);
    }
    Ok(HubLayout::Idx(dir.expect("four files")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_card_class_names() {
        // Excerpt of the card `datasets` writes for Fashion-MNIST.
        let card = "---\ndataset_info:\n  features:\n  - name: image\n    dtype: image\n  - name: label\n    dtype:\n      class_label:\n        names:\n          '0': T - shirt / top\n          '1': Trouser\n          '2': Pullover\n  splits:\n  - name: train\n---\n# Fashion";
        assert_eq!(
            card_classes(card).unwrap(),
            vec!["T - shirt / top", "Trouser", "Pullover"]
        );
        assert!(card_classes("# no front matter").is_none());
    }
}
