//! What reads the results: the terminal table, the HTML report and its SVG charts, Markdown,
//! the JSON and JUnit verdicts, and the tolerance-sizing report.

pub mod html;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod size;
pub mod svg;
pub mod table;
pub mod verdict;
