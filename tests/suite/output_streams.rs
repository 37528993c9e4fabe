//! stdout carries data only when it is asked for; status lines go to stderr, and `--quiet`
//! silences them on every long command.

use assert_cmd::Command;
use seedsweep::results::schema;

fn seedsweep() -> Command {
    Command::cargo_bin("seedsweep").expect("binary is built by cargo test")
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

const T1: [&str; 4] = [
    "--scenario",
    "deepspeed-tied-row-parallel",
    "--param",
    "35-3-False-0",
];

#[test]
fn status_lines_go_to_stderr_and_quiet_silences_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let out = seedsweep()
        .args(["sweep", "--seeds", "120", "--mutants", "all"])
        .args(T1)
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(
        so.contains("deepspeed-tied-row-parallel"),
        "the table: {so}"
    );
    assert!(!so.contains("wrote"), "{so}");
    assert!(se.contains("wrote ") && se.contains("summary.csv"), "{se}");

    // --quiet: the table, and nothing on stderr.
    let q = seedsweep()
        .args(["sweep", "--seeds", "3", "--quiet"])
        .args(T1)
        .arg("--out")
        .arg(tmp.path().join("q"))
        .output()
        .unwrap();
    assert!(q.status.success());
    assert_eq!(text(&q.stderr), "");

    // The other long commands: report, size, scale, merge.
    for args in [
        vec!["report".to_string(), dir.display().to_string()],
        vec!["size".to_string(), dir.display().to_string()],
        vec![
            "scale".into(),
            "--k".into(),
            "32".into(),
            "--tp".into(),
            "2".into(),
            "--seeds".into(),
            "2".into(),
            "--out".into(),
            tmp.path().join("scale").display().to_string(),
        ],
    ] {
        let loud = seedsweep().args(&args).output().unwrap();
        assert!(loud.status.success(), "{args:?}");
        assert!(!text(&loud.stdout).contains("wrote"), "{args:?}");
        assert!(text(&loud.stderr).contains("wrote"), "{args:?}");
        let quiet = seedsweep().args(&args).arg("-q").output().unwrap();
        assert!(quiet.status.success(), "{args:?} -q");
        assert_eq!(text(&quiet.stderr), "", "{args:?} -q");
    }
}

#[test]
fn size_out_dash_writes_only_the_csv_to_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    seedsweep()
        .args(["sweep", "--seeds", "120", "--quiet", "--mutants", "all"])
        .args(T1)
        .arg("--out")
        .arg(dir)
        .assert()
        .success();
    let out = seedsweep()
        .arg("size")
        .arg(dir)
        .args(["--out", "-"])
        .output()
        .unwrap();
    assert!(out.status.success());
    // Every byte of stdout is the recommendations table, with its declared columns.
    let rows = schema::check_csv(&out.stdout, schema::RECOMMENDATIONS).unwrap();
    assert!(rows > 0);
    // The human tables went to stderr instead.
    assert!(text(&out.stderr).contains("atol @rtol 1.3e-6"));
    assert!(!dir.join("recommendations.csv").exists());
}
