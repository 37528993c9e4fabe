//! `repro --dump DIR` writes every recorded tensor as a `.npy` file that `numpy.load` reads
//! with the tensor's shape: checked here without Python, by reading the NPY format (version
//! 1.0: magic, header dict, little-endian data) and comparing every value, bit for bit, with
//! the CSV dump of the same run.

use std::collections::BTreeMap;
use std::path::Path;

use assert_cmd::Command;

/// (descr, shape, values widened to f64) of a .npy file.
pub(crate) fn read_npy(path: &Path) -> (String, Vec<usize>, Vec<f64>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY", "{}", path.display());
    let (major, _minor) = (b[6], b[7]);
    let (hlen, start) = match major {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 => (
            u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize,
            12,
        ),
        v => panic!("npy version {v}"),
    };
    let header = std::str::from_utf8(&b[start..start + hlen]).unwrap();
    assert_eq!(
        (start + hlen) % 64,
        0,
        "data aligned to 64 bytes as numpy writes it"
    );
    let field = |k: &str| {
        let i = header.find(&format!("'{k}': ")).unwrap() + k.len() + 4;
        header[i..].to_string()
    };
    let descr = field("descr");
    let descr = descr[1..descr[1..].find('\'').unwrap() + 1].to_string();
    assert!(field("fortran_order").starts_with("False"));
    let shape = field("shape");
    let shape: Vec<usize> = shape[1..shape.find(')').unwrap()]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let data = &b[start + hlen..];
    let values: Vec<f64> = match descr.as_str() {
        "<f4" => data
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect(),
        "<f8" => data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        d => panic!("dtype {d}"),
    };
    assert_eq!(values.len(), shape.iter().product::<usize>());
    (descr, shape, values)
}

#[test]
fn every_dumped_tensor_is_an_npy_file_with_its_shape_and_the_csv_values() {
    let tmp = tempfile::tempdir().unwrap();
    // T1 (per-step checks) and T2 (micro-step labels `1.0`).
    for (scenario, param, stem) in [
        (
            "deepspeed-tied-row-parallel",
            "35-3-False-0",
            "deepspeed-tied-row-parallel__35-3-False-0__cpu-fma__seed8199",
        ),
        (
            "deepspeed-row-parallel",
            "32-input_shape0-lm_head-False",
            "deepspeed-row-parallel__32-input_shape0-lm_head-False__cpu-fma__seed8199",
        ),
    ] {
        Command::cargo_bin("seedsweep")
            .unwrap()
            .args(["repro", "-q", "--seed", "8199", "--scenario", scenario])
            .args(["--param", param, "--dump"])
            .arg(tmp.path())
            .assert()
            .success();
        let mut csv_values: BTreeMap<(String, String, String, String), Vec<f64>> = BTreeMap::new();
        let mut r = csv::Reader::from_path(tmp.path().join(format!("{stem}.csv"))).unwrap();
        for rec in r.records() {
            let rec = rec.unwrap();
            let key = (
                rec[0].to_string(),
                rec[1].to_string(),
                rec[2].to_string(),
                rec[3].to_string(),
            );
            csv_values
                .entry(key)
                .or_default()
                .push(rec[5].parse().unwrap());
        }
        let dir = tmp.path().join(stem);
        let mut n = 0;
        let mut shaped = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            let parts: Vec<&str> = name.split("__").collect();
            let key = (
                parts[0].to_string(),
                parts[1].to_string(),
                parts[2].trim_start_matches("step").to_string(),
                parts[3].to_string(),
            );
            let want = csv_values
                .get(&key)
                .unwrap_or_else(|| panic!("{name}: no such tensor in the CSV dump"));
            let (descr, shape, values) = read_npy(&path);
            let f32_side = key.0 != "f64" && key.3 != "expected-f64";
            assert_eq!(descr, if f32_side { "<f4" } else { "<f8" }, "{name}");
            assert_eq!(values.len(), want.len(), "{name}");
            for (a, b) in values.iter().zip(want) {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{name}"
                );
            }
            shaped += usize::from(shape.len() > 1);
            n += 1;
        }
        assert_eq!(
            n,
            csv_values.len(),
            "{stem}: one .npy per tensor of the CSV dump"
        );
        assert!(
            shaped > 0,
            "{stem}: matrices keep their 2-D (or more) shape"
        );
    }
}
