//! The diff report (Markdown) as HTML, safe to put in a page: raw HTML in the
//! Markdown is shown as text, and links go only to http(s) or relative addresses.
//! A report holds names and values from repositories and clusters, so it is
//! rendered as hostile text.

use pulldown_cmark::{
    Alignment, CodeBlockKind, CowStr, Event, LinkType, Options, Parser, Tag, TagEnd, html,
};

/// Renders Markdown (tables, code blocks, strikethrough, task lists) to HTML.
/// Raw HTML becomes escaped text (a block of it, a code block); a link or image
/// whose address is not http(s) or relative keeps its text and loses its address;
/// an image becomes a link to it (the page's policy loads no image from elsewhere).
/// Mermaid diagrams stay code blocks.
pub fn to_html(markdown: &str) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    // Whether each open link (or image) was kept, to drop the end of those that were not.
    let mut open_links: Vec<bool> = Vec::new();
    let events = Parser::new_ext(markdown, options).filter_map(|event| match event {
        Event::Html(raw) | Event::InlineHtml(raw) => Some(Event::Text(raw)),
        // A column's alignment would be an inline style, which the page's policy refuses.
        Event::Start(Tag::Table(alignments)) => Some(Event::Start(Tag::Table(vec![
            Alignment::None;
            alignments
                .len()
        ]))),
        Event::Start(Tag::HtmlBlock) => Some(Event::Start(Tag::CodeBlock(CodeBlockKind::Indented))),
        Event::End(TagEnd::HtmlBlock) => Some(Event::End(TagEnd::CodeBlock)),
        Event::Start(
            Tag::Link {
                dest_url, title, ..
            }
            | Tag::Image {
                dest_url, title, ..
            },
        ) => {
            let kept = is_safe_url(&dest_url);
            open_links.push(kept);
            kept.then(|| Event::Start(link_to(dest_url, title)))
        }
        Event::End(TagEnd::Link | TagEnd::Image) => {
            let kept = open_links.pop().unwrap_or(false);
            kept.then_some(Event::End(TagEnd::Link))
        }
        other => Some(other),
    });
    let mut out = String::with_capacity(markdown.len() * 3 / 2);
    html::push_html(&mut out, events);
    out
}

fn link_to<'a>(dest_url: CowStr<'a>, title: CowStr<'a>) -> Tag<'a> {
    Tag::Link {
        link_type: LinkType::Inline,
        dest_url,
        title,
        id: CowStr::Borrowed(""),
    }
}

/// An http(s) address, or a relative one (no scheme). Browsers ignore tabs and
/// newlines inside a URL (`java\tscript:`), so any control character refuses it.
pub(crate) fn is_safe_url(url: &str) -> bool {
    if url.chars().any(char::is_control) {
        return false;
    }
    let url = url.trim_start();
    let scheme_end = url.find([':', '/', '?', '#']);
    match scheme_end {
        Some(at) if url[at..].starts_with(':') => {
            let scheme = &url[..at];
            scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_and_code_blocks_render() {
        let html =
            to_html("| kind | name |\n|:---|---:|\n| Deployment | web |\n\n```yaml\na: 1\n```\n");
        assert!(html.contains("<table>"), "{html}");
        assert!(html.contains("<td>Deployment</td>"), "{html}");
        assert!(
            !html.contains("style="),
            "alignment is no inline style: {html}"
        );
        assert!(
            html.contains("<pre><code class=\"language-yaml\">a: 1\n</code></pre>"),
            "{html}"
        );
    }

    #[test]
    fn mermaid_stays_code() {
        let html = to_html("```mermaid\ngraph LR\n  a --> b\n```\n");
        assert!(
            html.contains("<code class=\"language-mermaid\">graph LR\n  a --&gt; b\n</code>"),
            "{html}"
        );
    }

    #[test]
    fn raw_html_is_shown_as_text() {
        let html = to_html(
            "<script>alert(1)</script>\n\nA <img src=x onerror=alert(1)> inline, <b>bold</b>.\n",
        );
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{html}"
        );
    }

    #[test]
    fn only_http_and_relative_links_keep_their_address() {
        let html = to_html(
            "[a](javascript:alert(1)) [b](JavaScript:alert(2)) [c](data:text/html,x) \
             [d](vbscript:x) <javascript:alert(3)> [e](https://example.com/x) [f](../models/web.yaml) \
             [g](#objects) ![h](javascript:alert(4)) ![i](https://example.com/i.png)",
        );
        for refused in ["javascript:", "JavaScript:", "data:", "vbscript:"] {
            assert!(
                !html.contains(&format!("href=\"{refused}")),
                "{refused} in {html}"
            );
        }
        assert!(!html.contains("<img"), "{html}");
        for kept in [
            "https://example.com/x",
            "../models/web.yaml",
            "#objects",
            "https://example.com/i.png",
        ] {
            assert!(
                html.contains(&format!("href=\"{kept}\"")),
                "{kept} missing in {html}"
            );
        }
        // The words of refused links stay.
        assert!(html.contains("<p>a b c d javascript:alert(3) <a"), "{html}");
        assert!(html.contains("</a> h <a"), "{html}");
    }

    #[test]
    fn scheme_check_sees_through_tricks() {
        assert!(!is_safe_url("java\tscript:alert(1)"));
        assert!(!is_safe_url(" javascript:alert(1)"));
        assert!(!is_safe_url("JAVASCRIPT:alert(1)"));
        assert!(is_safe_url("HTTPS://example.com"));
        assert!(is_safe_url("/a:b"));
        assert!(is_safe_url("a?b=c:d"));
    }
}
