//! NVIDIA GPUs through NVML (`nvml-wrapper`, which loads `libnvidia-ml.so` at run time).
//!
//! A machine without the driver is normal (CI, laptops, CPU nodes): [`probe_nvml`] then
//! returns no GPUs and a note saying why ("no NVIDIA driver found (libnvidia-ml.so): 0
//! GPUs"), never an error that would stop the agent. A GPU that NVML lists but cannot
//! describe is left out, with a note; the agent must not offer a device it cannot name.
//!
//! Kept here: the NVML calls and nothing else. Which NUMA domain a GPU hangs off is read
//! from sysfs by [`crate::discovery`] (from its PCI bus id), with NVML's answer as a
//! fallback, because sysfs can be faked in tests and NVML cannot. What the health checks
//! make of NVML's counters is decided in [`crate::health`], on [`GpuHealthReading`]s read
//! here ([`read_health`]) and the critical XIDs a thread collects ([`XidLog::watch`]).

use nvml_wrapper::Device;
use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, RetirementCause};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

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

/// Each GPU's utilisation and memory now, as NVML reads them; nothing without NVML (no
/// driver: nothing to report, the metrics simply have no such series for the node). A GPU
/// NVML cannot read is left out of this sample.
pub fn read_usage() -> Vec<cadre_proto::agent::GpuUsage> {
    let Ok(nvml) = Nvml::init() else {
        return Vec::new();
    };
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .filter_map(|index| {
            let device = nvml.device_by_index(index).ok()?;
            let rates = device.utilization_rates().ok()?;
            let memory = device.memory_info().ok()?;
            Some(cadre_proto::agent::GpuUsage {
                index,
                utilization_percent: rates.gpu.min(100),
                memory_used_bytes: memory.used,
                memory_total_bytes: memory.total,
            })
        })
        .take(cadre_proto::agent::MAX_GPUS_PER_REPORT)
        .collect()
}

/// One GPU's health as NVML reports it. A counter is `None` where the GPU does not support
/// its query (no ECC, ECC disabled, an architecture without it) or NVML could not read it
/// (logged); either way it is not judged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuHealthReading {
    pub index: u32,
    pub uuid: String,
    /// Uncorrectable ECC errors since the driver loaded (volatile: a reset clears them).
    pub ecc_uncorrectable: Option<u64>,
    /// Row remapping (Ampere and later).
    pub row_remapping: Option<RowRemapping>,
    /// Dynamic page retirement (before Ampere; Ampere and later remap rows instead).
    pub page_retirement: Option<PageRetirement>,
    /// Critical XIDs seen since the agent started, each once, first seen first (see
    /// [`XidLog`]).
    pub xids: Vec<u64>,
    /// NVML says the GPU is lost or needs a reset (what a query answered).
    pub unusable: Option<String>,
}

/// What `nvmlDeviceGetRemappedRows` says.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RowRemapping {
    /// Rows remapped for uncorrectable errors.
    pub uncorrectable_rows: u32,
    /// A remapping waits for the next reset of the GPU.
    pub pending: bool,
    /// A remapping failed: the GPU has run out of spare rows.
    pub failed: bool,
}

/// What page retirement says.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PageRetirement {
    /// Pages retired (for double-bit and for multiple single-bit errors).
    pub retired: u64,
    /// Pages wait to be retired at the next driver reload.
    pub pending: bool,
}

/// Reads every GPU's health counters; none when NVML cannot be used (the count check says
/// why) and without the GPUs NVML cannot reach (the count check counts them).
pub fn read_health(xids: &XidLog) -> Vec<GpuHealthReading> {
    let Ok(nvml) = Nvml::init() else {
        return Vec::new();
    };
    let count = nvml.device_count().unwrap_or(0);
    let seen = xids.seen();
    let mut readings = Vec::new();
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        let Ok(uuid) = device.uuid() else {
            continue;
        };
        let mut reading = GpuHealthReading {
            index,
            xids: seen.get(&uuid).cloned().unwrap_or_default(),
            uuid,
            ..GpuHealthReading::default()
        };
        reading.ecc_uncorrectable = supported(
            &mut reading,
            "uncorrectable ECC errors",
            device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        );
        reading.row_remapping = supported(&mut reading, "remapped rows", remapped_rows(&device));
        reading.page_retirement =
            supported(&mut reading, "retired pages", page_retirement(&device));
        readings.push(reading);
    }
    readings
}

/// A query's answer: `None` when not supported (or failing otherwise, logged); a GPU lost
/// or needing a reset is marked so.
fn supported<T>(
    reading: &mut GpuHealthReading,
    what: &str,
    answer: Result<T, NvmlError>,
) -> Option<T> {
    match answer {
        Ok(v) => Some(v),
        Err(NvmlError::NotSupported) => None,
        Err(e @ (NvmlError::GpuLost | NvmlError::ResetRequired)) => {
            reading.unusable.get_or_insert_with(|| e.to_string());
            None
        }
        Err(e) => {
            tracing::warn!(gpu = reading.index, uuid = %reading.uuid, error = %e, "NVML cannot read the GPU's {what}: not checked");
            None
        }
    }
}

fn remapped_rows(device: &Device) -> Result<RowRemapping, NvmlError> {
    // nvml-wrapper binds the call but does not wrap it.
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corrected, mut uncorrected, mut pending, mut failed) = (0, 0, 0, 0);
    // SAFETY: `sym` is `nvmlDeviceGetRemappedRows` of the library `device`'s `Nvml` loaded
    // and still holds (it outlives `device`), typed as nvml-wrapper-sys binds it; the
    // handle is `device`'s, valid while `device` lives (across this call); the four
    // pointers are to live, distinct, writable `c_uint`s, which is all the call writes.
    let code = unsafe {
        sym(
            device.handle(),
            &mut corrected,
            &mut uncorrected,
            &mut pending,
            &mut failed,
        )
    };
    nvml_try(code)?;
    Ok(RowRemapping {
        uncorrectable_rows: uncorrected,
        pending: pending != 0,
        failed: failed != 0,
    })
}

fn page_retirement(device: &Device) -> Result<PageRetirement, NvmlError> {
    let pending = device.are_pages_pending_retired()?;
    let mut retired = 0;
    for cause in [
        RetirementCause::MultipleSingleBitEccErrors,
        RetirementCause::DoubleBitEccError,
    ] {
        retired += device.retired_pages(cause)?.len() as u64;
    }
    Ok(PageRetirement { retired, pending })
}

/// The critical XIDs NVML reported since the agent started, by GPU UUID, each once.
///
/// An XID is an event: NVML tells it once, to an event set registered before it happens.
/// A thread ([`XidLog::watch`]) waits on such a set for the agent's life and records what
/// comes; the health checks read the record. The thread ends once every clone of the log
/// is dropped (it looks between waits, every `XID_WAIT`).
#[derive(Clone, Debug, Default)]
pub struct XidLog(Arc<Mutex<BTreeMap<String, Vec<u64>>>>);

/// How long the XID thread waits for an event at a time.
const XID_WAIT: Duration = Duration::from_secs(5);

/// The most distinct XIDs kept per GPU. Each is kept once: the applications' own (13, 31,
/// 43 and 45 come with every faulty kernel) must not crowd out the one that matters.
const MAX_XIDS_PER_GPU: usize = 64;

impl PartialEq for XidLog {
    /// The same log (what it holds changes under it).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for XidLog {}

impl XidLog {
    /// A log filled by a thread of its own, for nodes with real GPUs. Without NVML, or
    /// when no GPU supports the event, the thread says so (logged) and ends: the log stays
    /// empty.
    pub fn watch() -> XidLog {
        let log = XidLog::default();
        let weak = Arc::downgrade(&log.0);
        let spawned = std::thread::Builder::new()
            .name("nvml-xid".into())
            .spawn(move || watch_xids(&weak));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the thread that watches for XID errors: they are not checked");
        }
        log
    }

    /// What was seen, by GPU UUID.
    pub fn seen(&self) -> BTreeMap<String, Vec<u64>> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }

    fn record(log: &Mutex<BTreeMap<String, Vec<u64>>>, uuid: String, xid: u64) {
        if let Ok(mut m) = log.lock() {
            let list = m.entry(uuid).or_default();
            if list.len() < MAX_XIDS_PER_GPU && !list.contains(&xid) {
                list.push(xid);
            }
        }
    }
}

fn watch_xids(log: &Weak<Mutex<BTreeMap<String, Vec<u64>>>>) {
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(e) => {
            tracing::info!(why = %init_failure_note(&e), "XID errors are not watched");
            return;
        }
    };
    let mut set = match nvml.create_event_set() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "NVML cannot make an event set: XID errors are not watched");
            return;
        }
    };
    let mut watched = 0;
    for index in 0..nvml.device_count().unwrap_or(0) {
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        let supported = device
            .supported_event_types()
            .is_ok_and(|t| t.contains(EventTypes::CRITICAL_XID_ERROR));
        if !supported {
            tracing::info!(gpu = index, "the GPU reports no XID events: not watched");
            continue;
        }
        // Registering takes the set and gives it back (or frees it on failure).
        set = match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(gpu = index, error = %e.error, "NVML cannot watch the GPU's XID errors: none are watched");
                return;
            }
        };
        watched += 1;
    }
    if watched == 0 {
        return;
    }
    loop {
        let event = set.wait(XID_WAIT.as_millis() as u32);
        let Some(log) = log.upgrade() else {
            return;
        };
        match event {
            Ok(event) => {
                let xid = match event.event_data {
                    Some(XidError::Value(x)) => x,
                    // NVML's 999: an XID it cannot name, recorded as such.
                    Some(XidError::Unknown) => 999,
                    None => continue,
                };
                let uuid = event.device.uuid().unwrap_or_else(|_| "?".into());
                tracing::warn!(xid, uuid = %uuid, "XID error");
                XidLog::record(&log, uuid, xid);
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                // A lost GPU answers every wait at once: do not spin on it.
                tracing::warn!(error = %e, "waiting for XID errors failed");
                drop(log);
                std::thread::sleep(XID_WAIT);
            }
        }
    }
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
    fn reading_usage_without_a_driver_reports_nothing() {
        // This machine has no NVIDIA driver (CI never has one); with one, every GPU NVML
        // lists and can read is reported, each within NVML's ranges.
        let usage = read_usage();
        if probe_nvml().gpus.is_empty() {
            assert!(usage.is_empty(), "{usage:?}");
        }
        for u in usage {
            assert!(u.utilization_percent <= 100 && u.memory_used_bytes <= u.memory_total_bytes);
        }
    }

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
