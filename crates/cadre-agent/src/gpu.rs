//! NVIDIA GPUs through NVML (`nvml-wrapper`, which loads `libnvidia-ml.so` at run time).
//!
//! A machine without the driver is normal (CI, laptops, CPU nodes): [`probe_nvml`] then
//! returns no GPUs and a note saying why ("no NVIDIA driver found (libnvidia-ml.so): 0
//! GPUs"), never an error that would stop the agent. A GPU that NVML lists but cannot
//! describe is left out, with a note; the agent must not offer a device it cannot name.
//!
//! Kept here: the NVML calls and nothing else. Which NUMA domain a GPU hangs off is read
//! from sysfs by [`crate::discovery`] (from its PCI bus id), with NVML's answer as a
//! fallback, because sysfs can be faked in tests and NVML cannot.

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

/// One GPU as NVML describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvmlGpu {
    /// NVML's index (`nvidia-smi` order); `CUDA_VISIBLE_DEVICES` with
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID` uses the same order.
    pub index: u32,
    pub uuid: String,
    /// Product name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    pub mem_mib: u64,
    /// PCI bus id as NVML prints it (`00000000:3B:00.0`).
    pub pci_bus_id: String,
    /// NUMA node as NVML reports it, where the driver supports the query.
    pub numa_node: Option<u32>,
}

/// What NVML found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuProbe {
    pub gpus: Vec<NvmlGpu>,
    /// Why there are fewer GPUs than one might expect (no driver, a device NVML could not
    /// describe).
    pub notes: Vec<String>,
}

/// The reason NVML could not be used, as a report line.
pub fn init_failure_note(err: &NvmlError) -> String {
    match err {
        NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound => {
            "no NVIDIA driver found (libnvidia-ml.so): 0 GPUs".to_string()
        }
        NvmlError::DriverNotLoaded => {
            "the NVIDIA driver is installed but not loaded: 0 GPUs".to_string()
        }
        other => format!("NVML failed to initialise ({other}): 0 GPUs"),
    }
}

/// Asks NVML for the node's GPUs.
pub fn probe_nvml() -> GpuProbe {
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            return GpuProbe {
                gpus: Vec::new(),
                notes: vec![init_failure_note(&e)],
            };
        }
    };
    let mut probe = GpuProbe::default();
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => {
            probe
                .notes
                .push(format!("NVML could not count the GPUs ({e}): 0 GPUs"));
            return probe;
        }
    };
    for index in 0..count {
        match describe(&nvml, index) {
            Ok(gpu) => probe.gpus.push(gpu),
            Err(e) => probe.notes.push(format!(
                "GPU {index} left out: NVML could not describe it ({e})"
            )),
        }
    }
    probe
}

fn describe(nvml: &Nvml, index: u32) -> Result<NvmlGpu, NvmlError> {
    let device = nvml.device_by_index(index)?;
    Ok(NvmlGpu {
        index,
        uuid: device.uuid()?,
        name: device.name()?,
        mem_mib: device.memory_info()?.total / (1 << 20),
        pci_bus_id: device.pci_info()?.bus_id,
        numa_node: device.numa_node_id().ok(),
    })
}

/// The sysfs name of a PCI device from NVML's bus id: `00000000:3B:00.0` is `0000:3b:00.0`.
pub fn sysfs_pci_address(bus_id: &str) -> Option<String> {
    let bus_id = bus_id.trim().to_ascii_lowercase();
    let (domain, rest) = bus_id.split_once(':')?;
    let domain = u32::from_str_radix(domain, 16).ok()?;
    if rest.len() != 7 {
        return None;
    }
    Some(format!("{domain:04x}:{rest}"))
}

/// The model name cadre uses for a GPU: lowercase, vendor dropped, spaces as dashes
/// (`NVIDIA H100 80GB HBM3` is `h100-80gb-hbm3`).
pub fn model_name(product: &str) -> String {
    let lower = product.trim().to_ascii_lowercase();
    let lower = lower.strip_prefix("nvidia ").unwrap_or(&lower);
    lower.split_whitespace().collect::<Vec<_>>().join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_map_to_sysfs_names() {
        assert_eq!(
            sysfs_pci_address("00000000:3B:00.0").as_deref(),
            Some("0000:3b:00.0")
        );
        assert_eq!(
            sysfs_pci_address("0001:C1:00.0").as_deref(),
            Some("0001:c1:00.0")
        );
        assert_eq!(sysfs_pci_address("junk"), None);
        assert_eq!(sysfs_pci_address("zz:3b:00.0"), None);
    }

    #[test]
    fn model_names_are_short_and_lowercase() {
        assert_eq!(model_name("NVIDIA H100 80GB HBM3"), "h100-80gb-hbm3");
        assert_eq!(model_name("NVIDIA A100-SXM4-80GB"), "a100-sxm4-80gb");
        assert_eq!(model_name("Tesla V100-SXM2-16GB"), "tesla-v100-sxm2-16gb");
    }

    #[test]
    fn a_missing_library_is_a_note_not_an_error() {
        let note = init_failure_note(&NvmlError::LibraryNotFound);
        assert_eq!(note, "no NVIDIA driver found (libnvidia-ml.so): 0 GPUs");
    }

    /// On a machine without the NVIDIA driver (this one, CI), NVML finds nothing and says
    /// why; on one with GPUs, each found GPU is fully described.
    #[test]
    fn probing_this_machine_never_fails() {
        let probe = probe_nvml();
        if std::path::Path::new("/dev/nvidia0").exists() {
            for g in &probe.gpus {
                assert!(!g.uuid.is_empty() && g.mem_mib > 0, "{g:?}");
            }
        } else {
            assert!(probe.gpus.is_empty());
            assert_eq!(probe.notes.len(), 1, "{:?}", probe.notes);
            assert!(probe.notes[0].ends_with(": 0 GPUs"), "{:?}", probe.notes);
        }
    }
}
