//! GPU requests: `--gres=gpu[:type][:count]`, `--gpus`, `--gpus-per-node` and
//! `--gpus-per-task` (`[type:]count`), and the TRES strings `scontrol` shows for them.
//!
//! A count may carry Slurm's `k`, `m`, `g` suffixes (powers of 1024). A type without a count
//! asks for one GPU of that type (`--gpus=a100`). GPUs are the only generic resource cadre
//! knows, as on the reference cluster, whose `GresTypes` is `gpu`: other names are refused
//! with Slurm's message for an unknown GRES. One type per request: Slurm's lists of several
//! types (`--gpus-per-node=volta:3,kepler:1`) are refused as unsupported.
//!
//! TRES strings follow current Slurm (`gres/gpu:2`); Slurm 22.05 printed `gres:gpu:2`.

use crate::error::SlurmError;

/// Some GPUs, of one model or any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuRequest {
    pub model: Option<String>,
    pub count: u64,
    /// How the user wrote it after `gpu:` (for the TRES string).
    pub text: String,
}

impl GpuRequest {
    /// The TRES string `scontrol` shows: `gres/gpu:a100:2`.
    pub fn tres(&self) -> String {
        if self.text.is_empty() {
            "gres/gpu".into()
        } else {
            format!("gres/gpu:{}", self.text)
        }
    }
}

fn parse_count(s: &str) -> Option<u64> {
    let (digits, mult) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1024),
        'm' | 'M' => (&s[..s.len() - 1], 1024 * 1024),
        'g' | 'G' => (&s[..s.len() - 1], 1024 * 1024 * 1024),
        _ => (s, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

fn invalid_gres() -> SlurmError {
    SlurmError::Refused("Invalid generic resource (gres) specification".into())
}

/// `[type:]count` of `--gpus`, `--gpus-per-node`, `--gpus-per-task`.
pub fn parse_gpus(value: &str) -> Result<GpuRequest, SlurmError> {
    if value.contains(',') {
        return Err(SlurmError::unsupported(format!(
            "a list of GPU types (`{value}`)"
        )));
    }
    let parts: Vec<&str> = value.split(':').collect();
    let (model, count) = match parts.as_slice() {
        [c] => match parse_count(c) {
            Some(n) => (None, n),
            None if !c.is_empty() => (Some(c.to_string()), 1),
            None => return Err(invalid_gres()),
        },
        [t, c] if !t.is_empty() => (
            Some(t.to_string()),
            parse_count(c).ok_or_else(invalid_gres)?,
        ),
        _ => return Err(invalid_gres()),
    };
    Ok(GpuRequest {
        model,
        count,
        text: value.to_string(),
    })
}

/// `--gres=gpu[:type][:count][,...]`: GPUs per node, or `None` for `--gres=none`.
pub fn parse_gres(value: &str) -> Result<Option<GpuRequest>, SlurmError> {
    if value.is_empty() {
        return Err(SlurmError::submission(
            "Invalid Trackable RESource (TRES) specification",
        ));
    }
    if value.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let mut found: Option<GpuRequest> = None;
    let mut texts = Vec::new();
    for entry in value.split(',') {
        // `gres:` and `gres/` prefixes are accepted, as Slurm does.
        let entry = entry
            .strip_prefix("gres:")
            .or_else(|| entry.strip_prefix("gres/"))
            .unwrap_or(entry);
        let (name, rest) = match entry.split_once(':') {
            Some((n, r)) => (n, Some(r)),
            None => (entry, None),
        };
        if name != "gpu" {
            return Err(invalid_gres());
        }
        let req = match rest {
            None => GpuRequest {
                model: None,
                count: 1,
                text: String::new(),
            },
            Some(r) => parse_gpus(r)?,
        };
        texts.push(req.text.clone());
        found = Some(match found {
            None => req,
            Some(prev) if prev.model.is_some() != req.model.is_some() => {
                return Err(SlurmError::Refused(
                    "Invalid GRES specification (with and without type identification)".into(),
                ));
            }
            Some(prev) if prev.model != req.model => {
                return Err(SlurmError::unsupported(format!(
                    "a list of GPU types (`--gres={value}`)"
                )));
            }
            Some(prev) => GpuRequest {
                count: prev.count + req.count,
                ..prev
            },
        });
    }
    Ok(found.map(|mut r| {
        // The TRES string keeps every entry as written.
        r.text = texts.join(",gres/gpu:");
        r
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_counts_and_types() {
        let g = parse_gpus("4").unwrap();
        assert_eq!((g.model, g.count, g.text.as_str()), (None, 4, "4"));
        let g = parse_gpus("a100:2").unwrap();
        assert_eq!((g.model.as_deref(), g.count), (Some("a100"), 2));
        assert_eq!(g.tres(), "gres/gpu:a100:2");
        // A type alone is one GPU of that type, as Slurm takes `--gpus=x`.
        let g = parse_gpus("x").unwrap();
        assert_eq!((g.model.as_deref(), g.count), (Some("x"), 1));
        assert_eq!(parse_gpus("2k").unwrap().count, 2048);
        assert!(parse_gpus("a100:x").is_err());
        assert!(parse_gpus("").is_err());
        assert!(matches!(
            parse_gpus("volta:3,kepler:1"),
            Err(SlurmError::Unsupported { .. })
        ));
    }

    #[test]
    fn gres_lists() {
        let g = parse_gres("gpu:2").unwrap().unwrap();
        assert_eq!((g.count, g.tres()), (2, "gres/gpu:2".to_string()));
        let g = parse_gres("gpu").unwrap().unwrap();
        assert_eq!((g.count, g.tres()), (1, "gres/gpu".to_string()));
        let g = parse_gres("gpu:a100:2").unwrap().unwrap();
        assert_eq!(g.model.as_deref(), Some("a100"));
        let g = parse_gres("gpu:2,gpu:1").unwrap().unwrap();
        assert_eq!(
            (g.count, g.tres()),
            (3, "gres/gpu:2,gres/gpu:1".to_string())
        );
        assert_eq!(parse_gres("none").unwrap(), None);
        assert_eq!(
            parse_gres("mps:100").unwrap_err().to_string(),
            "Invalid generic resource (gres) specification"
        );
        assert_eq!(
            parse_gres("gpu:1:2:3").unwrap_err().to_string(),
            "Invalid generic resource (gres) specification"
        );
        assert_eq!(
            parse_gres("gpu:1,gpu:a100:1").unwrap_err().to_string(),
            "Invalid GRES specification (with and without type identification)"
        );
        assert_eq!(
            parse_gres("").unwrap_err().to_string(),
            "Batch job submission failed: Invalid Trackable RESource (TRES) specification"
        );
    }
}
