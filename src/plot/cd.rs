//! A critical-difference diagram (Demšar 2006, Fig. 1): the strategies' mean ranks over data
//! sets on one axis (1 = best, on the left), each named beside a leader line, Nemenyi's
//! critical difference drawn to scale above the axis, and a thick bar under every maximal
//! group of strategies whose mean ranks lie within it (the groups the test cannot tell apart).

use super::prim::{Anchor, Prim, Rgb};

const WIDTH: f64 = 720.0;
const MARGIN: f64 = 190.0;
const AXIS_Y: f64 = 70.0;
const ROW: f64 = 22.0;
const LABEL: f64 = 12.0;
const INK: Rgb = (0, 0, 0);
const GREY: Rgb = (110, 110, 110);

/// The diagram's content: strategies with their mean ranks, the critical difference, the
/// number of ranks on the axis and a title.
#[derive(Debug, Clone, PartialEq)]
pub struct CdDiagram {
    /// Title above the axis.
    pub title: String,
    /// `(name, mean rank)` per strategy, any order.
    pub ranks: Vec<(String, f64)>,
    /// The critical difference of mean ranks.
    pub cd: f64,
}

impl CdDiagram {
    /// The maximal groups (as index ranges into the strategies sorted by mean rank) of two or
    /// more strategies whose mean ranks differ by less than the critical difference.
    pub fn groups(&self) -> Vec<(usize, usize)> {
        let r = self.sorted();
        let mut out: Vec<(usize, usize)> = Vec::new();
        for i in 0..r.len() {
            let mut j = i;
            while j + 1 < r.len() && r[j + 1].1 - r[i].1 < self.cd {
                j += 1;
            }
            // A group inside the last one found adds nothing.
            if j > i && out.last().is_none_or(|&(_, e)| j > e) {
                out.push((i, j));
            }
        }
        out
    }

    fn sorted(&self) -> Vec<(String, f64)> {
        let mut r = self.ranks.clone();
        r.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        r
    }

    fn height(&self) -> f64 {
        let half = self.ranks.len().div_ceil(2) as f64;
        AXIS_Y + 34.0 + 8.0 * self.groups().len() as f64 + ROW * half + 10.0
    }

    fn layout(&self) -> Vec<Prim> {
        let r = self.sorted();
        let k = r.len().max(2);
        let x = |rank: f64| MARGIN + (rank - 1.0) / (k - 1) as f64 * (WIDTH - 2.0 * MARGIN);
        let line = |pts: Vec<(f64, f64)>, color: Rgb, width: f64| Prim::Line { pts, color, width };
        let text = |x: f64, y: f64, s: String, anchor: Anchor| Prim::Text {
            x,
            y,
            s,
            size: LABEL,
            anchor,
            vertical: false,
        };
        let mut p = vec![
            text(WIDTH / 2.0, 18.0, self.title.clone(), Anchor::Middle),
            line(vec![(x(1.0), AXIS_Y), (x(k as f64), AXIS_Y)], INK, 1.5),
        ];
        for t in 1..=k {
            let tx = x(t as f64);
            p.push(line(vec![(tx, AXIS_Y - 6.0), (tx, AXIS_Y)], INK, 1.0));
            p.push(text(tx, AXIS_Y - 10.0, t.to_string(), Anchor::Middle));
        }
        // The critical difference, to the axis's scale, at the top left.
        let cd_end = x(1.0 + self.cd.min((k - 1) as f64));
        p.push(line(vec![(x(1.0), 36.0), (cd_end, 36.0)], INK, 2.0));
        p.push(text(
            x(1.0),
            32.0,
            format!("CD = {:.2}", self.cd),
            Anchor::Start,
        ));
        let groups = self.groups();
        for (g, &(a, b)) in groups.iter().enumerate() {
            let y = AXIS_Y + 12.0 + 8.0 * g as f64;
            p.push(line(
                vec![(x(r[a].1) - 3.0, y), (x(r[b].1) + 3.0, y)],
                INK,
                4.0,
            ));
        }
        let top = AXIS_Y + 20.0 + 8.0 * groups.len() as f64;
        let half = r.len().div_ceil(2);
        for (i, (name, rank)) in r.iter().enumerate() {
            let left = i < half;
            let row = if left { i } else { r.len() - 1 - i };
            let y = top + ROW * row as f64;
            let (end, anchor) = match left {
                true => (MARGIN - 20.0, Anchor::End),
                false => (WIDTH - MARGIN + 20.0, Anchor::Start),
            };
            let label = format!("{name} ({rank:.2})");
            p.push(line(
                vec![(x(*rank), AXIS_Y), (x(*rank), y), (end, y)],
                GREY,
                1.0,
            ));
            let tx = if left { end - 4.0 } else { end + 4.0 };
            p.push(text(tx, y + 4.0, label, anchor));
        }
        p
    }

    /// The diagram as an SVG document.
    pub fn to_svg(&self) -> String {
        super::svg::render(WIDTH as u32, self.height().ceil() as u32, &self.layout())
    }

    /// The diagram as a PNG file's bytes.
    pub fn to_png(&self) -> Vec<u8> {
        super::raster::render(WIDTH as u32, self.height().ceil() as u32, &self.layout())
    }

    /// Writes `dir/STEM.svg` and `dir/STEM.png`, each atomically.
    pub fn save(&self, dir: &std::path::Path, stem: &str) -> crate::Result<()> {
        crate::fsutil::write_atomic(&dir.join(format!("{stem}.svg")), self.to_svg().as_bytes())?;
        crate::fsutil::write_atomic(&dir.join(format!("{stem}.png")), &self.to_png())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diagram(ranks: &[f64], cd: f64) -> CdDiagram {
        CdDiagram {
            title: String::new(),
            ranks: ranks
                .iter()
                .enumerate()
                .map(|(i, &r)| (format!("s{i}"), r))
                .collect(),
            cd,
        }
    }

    #[test]
    fn groups_are_the_maximal_runs_within_the_critical_difference() {
        // Sorted 1.0, 1.8, 2.6, 3.9 with CD 1: 1.0-1.8 and 1.8-2.6 are groups, 1.0-2.6 is
        // not (1.6 apart), and 3.9 stands alone (1.3 from 2.6).
        let d = diagram(&[2.6, 1.0, 3.9, 1.8], 1.0);
        assert_eq!(d.groups(), vec![(0, 1), (1, 2)]);
        // A critical difference below every gap: no group.
        assert!(diagram(&[1.0, 2.0, 3.0], 0.5).groups().is_empty());
        // Everything within it: one group.
        assert_eq!(diagram(&[1.0, 1.5, 2.0], 5.0).groups(), vec![(0, 2)]);
    }

    #[test]
    fn every_strategy_is_named_in_both_renderings() {
        let d = diagram(&[1.2, 2.5, 2.3, 4.0, 5.0], 1.0);
        let svg = d.to_svg();
        for i in 0..5 {
            assert!(svg.contains(&format!("s{i} (")), "s{i}");
        }
        assert!(svg.contains("CD = 1.00"));
        assert_eq!(&d.to_png()[1..4], b"PNG");
    }
}
