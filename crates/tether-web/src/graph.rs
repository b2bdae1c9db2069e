//! The dependency graph as SVG: one column per wave, left to right, a labelled box
//! per model, an arrow from what a model waits for to the model. Laid out from the
//! graph alone (no clock, no randomness), so the same graph gives the same bytes.
//! maud escapes every name; the stylesheet colours it (classes, no inline style).
//! Every element is closed: inside HTML, an SVG element left open would swallow
//! the ones after it.

use std::collections::BTreeMap;

use maud::{Markup, html};

use crate::view::Graph;

const MARGIN: usize = 8;
/// Room above the boxes for the waves' titles.
const HEADER: usize = 24;
const BOX_HEIGHT: usize = 24;
const ROW_GAP: usize = 12;
const COLUMN_GAP: usize = 48;
/// Wide enough for a character of the 12px monospace font the stylesheet sets.
const CHAR_WIDTH: usize = 8;
const BOX_PADDING: usize = 8;
/// Longer names are cut (the whole name is the box's tooltip).
const MAX_LABEL_CHARS: usize = 40;
/// Room for a wave's title ("wave 12").
const WAVE_TITLE_WIDTH: usize = 7 * CHAR_WIDTH;

/// Where a model's box is.
#[derive(Clone, Copy)]
struct Place {
    x: usize,
    y: usize,
    width: usize,
}

impl Place {
    fn middle_y(self) -> usize {
        self.y + BOX_HEIGHT / 2
    }
}

/// The graph as an `<svg>` element, sized to its content.
pub fn svg(graph: &Graph) -> String {
    let Layout {
        columns,
        places,
        width,
        height,
    } = layout(graph);
    let view_box = format!("0 0 {width} {height}");
    let markup = html! {
        svg xmlns="http://www.w3.org/2000/svg" class="graph" width=(width) height=(height) viewBox=(view_box)
            role="img" aria-label="Dependency graph: waves left to right" {
            defs {
                marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="8" markerHeight="8" orient="auto" {
                    path d="M0,0 L8,4 L0,8 z" {}
                }
            }
            @for (index, x) in columns.iter().enumerate() {
                text.wave x=(x) y=(MARGIN + 14) { "wave " (index + 1) }
            }
            @for (waiting, waited_for) in &graph.edges {
                @if let (Some(to), Some(from)) = (places.get(waiting.as_str()), places.get(waited_for.as_str())) {
                    (edge(*from, *to))
                }
            }
            @for wave in &graph.waves {
                @for model in wave {
                    @if let Some(place) = places.get(model.as_str()) {
                        (model_box(model, *place))
                    }
                }
            }
        }
    };
    markup.into_string()
}

/// The drawing: each wave's column, each model's box, the width and height.
struct Layout<'g> {
    /// Each wave's left edge.
    columns: Vec<usize>,
    places: BTreeMap<&'g str, Place>,
    width: usize,
    height: usize,
}

/// Lays the waves out left to right, each as wide as its longest label. A model
/// listed in two waves keeps its first place.
fn layout(graph: &Graph) -> Layout<'_> {
    let mut places = BTreeMap::new();
    let mut columns = Vec::with_capacity(graph.waves.len());
    let mut x = MARGIN;
    let mut bottom = MARGIN + HEADER;
    for wave in &graph.waves {
        let width = wave
            .iter()
            .map(|model| label(model).chars().count() * CHAR_WIDTH + 2 * BOX_PADDING)
            .max()
            .unwrap_or(0)
            .max(WAVE_TITLE_WIDTH);
        let mut y = MARGIN + HEADER;
        for model in wave {
            places
                .entry(model.as_str())
                .or_insert(Place { x, y, width });
            y += BOX_HEIGHT + ROW_GAP;
            bottom = bottom.max(y - ROW_GAP);
        }
        columns.push(x);
        x += width + COLUMN_GAP;
    }
    let width = if graph.waves.is_empty() {
        2 * MARGIN
    } else {
        x - COLUMN_GAP + MARGIN
    };
    Layout {
        columns,
        places,
        width,
        height: bottom + MARGIN,
    }
}

fn edge(from: Place, to: Place) -> Markup {
    let (x1, y1) = (from.x + from.width, from.middle_y());
    let (x2, y2) = (to.x, to.middle_y());
    // A curve leaving rightwards and arriving from the left, also when both are in
    // one wave (then it loops out and back).
    let bend = COLUMN_GAP / 2;
    let path = format!(
        "M{x1},{y1} C{},{y1} {},{y2} {x2},{y2}",
        x1 + bend,
        x2.saturating_sub(bend)
    );
    html! { path.edge d=(path) marker-end="url(#arrow)" {} }
}

fn model_box(model: &str, place: Place) -> Markup {
    html! {
        g.model data-model=(model) {
            title { (model) }
            rect x=(place.x) y=(place.y) width=(place.width) height=(BOX_HEIGHT) rx="4" {}
            text x=(place.x + BOX_PADDING) y=(place.y + 16) { (label(model)) }
        }
    }
}

/// The text in a model's box: the name, cut to [`MAX_LABEL_CHARS`].
fn label(model: &str) -> String {
    if model.chars().count() <= MAX_LABEL_CHARS {
        return model.to_string();
    }
    let mut cut: String = model.chars().take(MAX_LABEL_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shop() -> Graph {
        Graph {
            waves: vec![
                vec!["Database/db".into(), "ConfigMap/settings".into()],
                vec!["Slice/web".into()],
                vec!["Ingress/<script>alert(1)</script>".into()],
            ],
            edges: vec![
                ("Slice/web".into(), "Database/db".into()),
                (
                    "Ingress/<script>alert(1)</script>".into(),
                    "Slice/web".into(),
                ),
            ],
        }
    }

    #[test]
    fn one_box_per_model_and_one_arrow_per_edge() {
        let svg = svg(&shop());
        assert!(
            svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            "{svg}"
        );
        assert_eq!(svg.matches("<g class=\"model\"").count(), 4, "{svg}");
        assert_eq!(svg.matches("<path class=\"edge\"").count(), 2, "{svg}");
        for title in ["wave 1", "wave 2", "wave 3"] {
            assert!(
                svg.contains(&format!(">{title}</text>")),
                "{title} in {svg}"
            );
        }
        assert!(svg.contains("data-model=\"Slice/web\""), "{svg}");
        for element in ["rect", "path", "text", "g", "title"] {
            let opened = svg.matches(&format!("<{element} ")).count()
                + svg.matches(&format!("<{element}>")).count();
            assert_eq!(
                opened,
                svg.matches(&format!("</{element}>")).count(),
                "every <{element}> closed: {svg}"
            );
        }
    }

    #[test]
    fn names_are_escaped() {
        let svg = svg(&shop());
        assert!(!svg.contains("<script"), "{svg}");
        assert!(
            svg.contains("Ingress/&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{svg}"
        );
    }

    #[test]
    fn same_graph_same_bytes_and_sized_to_content() {
        assert_eq!(svg(&shop()), svg(&shop()));
        let wide = Graph {
            waves: vec![vec!["Deployment/a-rather-long-name-for-a-model".into()]; 4],
            edges: Vec::new(),
        };
        let narrow = Graph {
            waves: vec![vec!["Job/a".into()]],
            edges: Vec::new(),
        };
        let width = |svg: &str| -> usize {
            let start = svg.find("width=\"").map(|at| at + 7).unwrap_or(0);
            svg[start..]
                .split('"')
                .next()
                .and_then(|w| w.parse().ok())
                .unwrap_or(0)
        };
        assert!(
            width(&svg(&wide)) > 4 * width(&svg(&narrow)) / 2,
            "wider graph, wider drawing"
        );
        assert!(svg(&Graph::default()).contains("width=\"16\""));
    }

    #[test]
    fn long_names_are_cut_with_the_whole_name_as_tooltip() {
        let long = "Deployment/".to_string() + &"x".repeat(80);
        let svg = svg(&Graph {
            waves: vec![vec![long.clone()]],
            edges: Vec::new(),
        });
        assert!(svg.contains(&format!("<title>{long}</title>")), "{svg}");
        assert!(svg.contains('…'), "{svg}");
    }
}
