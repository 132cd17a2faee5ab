//! The script: its JSON schema, its validation, and the piecewise-linear schedules.
//!
//! See the crate documentation for the schema itself.

use std::collections::HashSet;
use std::time::Duration;

use nvml_wrapper_sys::bindings::{
    NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE,
    NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE,
};
use serde::Deserialize;

/// The environment variable naming the script file.
pub(crate) const SCRIPT_ENV: &str = "OOMSCOPE_FAKE_NVML_SCRIPT";

/// The most devices a script may declare (handles point into a fixed table of this size).
pub(crate) const MAX_DEVICES: usize = 64;

/// The latest time a schedule point may name, in milliseconds (about 31 years). Keeping times
/// below it lets interpolation run in exact integer arithmetic without overflow.
pub(crate) const MAX_SCHEDULE_MS: u64 = 1_000_000_000_000;

const DEFAULT_DRIVER_VERSION: &str = "580.65.06";
const DEFAULT_CUDA_DRIVER_VERSION: i32 = 13000;

fn default_driver_version() -> String {
    DEFAULT_DRIVER_VERSION.to_owned()
}

fn default_cuda_driver_version() -> i32 {
    DEFAULT_CUDA_DRIVER_VERSION
}

/// A whole script: what the fake machine reports between one `nvmlInit` and its `nvmlShutdown`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Script {
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    #[serde(default = "default_cuda_driver_version")]
    pub cuda_driver_version: i32,
    /// A non-zero `nvmlReturn_t` that `nvmlInit` returns instead of succeeding.
    #[serde(default)]
    pub init_error: Option<u32>,
    #[serde(default)]
    pub devices: Vec<DeviceScript>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeviceScript {
    pub name: String,
    pub uuid: String,
    pub total_bytes: u64,
    #[serde(default)]
    pub reserved_bytes: u64,
    /// Memory allocated on the device (NVML v2 `used`, which excludes `reserved`).
    #[serde(default)]
    pub used_bytes: Schedule,
    #[serde(default)]
    pub processes: Vec<ProcessScript>,
}

/// A rule adding processes to a device's compute-process list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProcessScript {
    #[serde(rename = "match")]
    pub matcher: Match,
    pub used_bytes: Schedule,
}

/// Which live processes a [`ProcessScript`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Match {
    /// `"children_of_caller"`: every live process whose parent is the process that loaded the
    /// fake.
    ChildrenOfCaller,
    /// `{"pid": 1234}`: that process, while it is alive.
    Pid(u32),
    /// `{"rank": 1}`: the live processes started with `RANK=1` in their environment whose
    /// parent was not (the rank torchrun started, not its forked workers): a rank's pid is not
    /// known before the run.
    Rank(u32),
}

/// What one device's memory looks like at one moment, in the NVML v2 sense.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MemorySnapshot {
    pub total: u64,
    pub reserved: u64,
    /// v2 `used`: allocated memory, excluding `reserved`.
    pub used: u64,
    /// `total - reserved - used`.
    pub free: u64,
}

impl MemorySnapshot {
    /// The v1 `used` (`nvmlMemory_t`): "Sum of Reserved and Allocated device memory".
    pub(crate) fn used_v1(&self) -> u64 {
        self.used.saturating_add(self.reserved)
    }
}

impl DeviceScript {
    pub(crate) fn memory_at(&self, elapsed: Duration) -> MemorySnapshot {
        let used = self.used_bytes.at(elapsed);
        MemorySnapshot {
            total: self.total_bytes,
            reserved: self.reserved_bytes,
            used,
            // Validation guarantees reserved + max(used) <= total; saturate anyway.
            free: self
                .total_bytes
                .saturating_sub(self.reserved_bytes)
                .saturating_sub(used),
        }
    }
}

/// A piecewise-linear function of the time since `nvmlInit`: `[ms, bytes]` points, linearly
/// interpolated between points, the first value held before the first point and the last one
/// after the last point. Two points at the same time make a step (the later one wins from that
/// time on). In JSON, either an array of `[ms, bytes]` pairs or a bare number for a constant.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "ScheduleRepr")]
pub(crate) struct Schedule {
    /// `(ms, bytes)`, non-empty, times non-decreasing and at most [`MAX_SCHEDULE_MS`].
    points: Vec<(u64, u64)>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScheduleRepr {
    Constant(u64),
    Points(Vec<(u64, u64)>),
}

impl Default for Schedule {
    fn default() -> Self {
        Self::constant(0)
    }
}

impl TryFrom<ScheduleRepr> for Schedule {
    type Error = String;

    fn try_from(repr: ScheduleRepr) -> Result<Self, String> {
        match repr {
            ScheduleRepr::Constant(bytes) => Ok(Self::constant(bytes)),
            ScheduleRepr::Points(points) => Self::new(points),
        }
    }
}

impl Schedule {
    pub(crate) fn constant(bytes: u64) -> Self {
        Self {
            points: vec![(0, bytes)],
        }
    }

    pub(crate) fn new(points: Vec<(u64, u64)>) -> Result<Self, String> {
        if points.is_empty() {
            return Err("a schedule needs at least one [ms, bytes] point".to_owned());
        }
        if let Some(&(ms, _)) = points.iter().find(|&&(ms, _)| ms > MAX_SCHEDULE_MS) {
            return Err(format!(
                "schedule time {ms} ms is past the limit of {MAX_SCHEDULE_MS} ms"
            ));
        }
        if let Some(pair) = points.windows(2).find(|pair| pair[1].0 < pair[0].0) {
            return Err(format!(
                "schedule times must not decrease ({} ms comes after {} ms)",
                pair[1].0, pair[0].0
            ));
        }
        Ok(Self { points })
    }

    /// The largest value the schedule ever takes (a piecewise-linear function peaks at a point).
    pub(crate) fn max(&self) -> u64 {
        self.points
            .iter()
            .map(|&(_, bytes)| bytes)
            .max()
            .unwrap_or(0)
    }

    /// The value `elapsed` after `nvmlInit`, exact to the byte (integer arithmetic, rounding
    /// toward the earlier point's value).
    pub(crate) fn at(&self, elapsed: Duration) -> u64 {
        const NS_PER_MS: u128 = 1_000_000;
        let t = elapsed.as_nanos();
        let ns = |ms: u64| u128::from(ms) * NS_PER_MS;
        let Some(i) = self.points.iter().rposition(|&(ms, _)| ns(ms) <= t) else {
            return self.points[0].1;
        };
        let Some(&(t1, v1)) = self.points.get(i + 1) else {
            return self.points[i].1;
        };
        let (t0, v0) = self.points[i];
        // i is the last point at or before t, so t0 <= t < t1. Both time spans are below
        // MAX_SCHEDULE_MS * 1e6 = 1e18 ns and the value span below 2^64, so the product stays
        // below 2^124 and fits an i128.
        let (t0, t1) = (ns(t0), ns(t1));
        let dt = i128::try_from(t - t0).unwrap_or(i128::MAX);
        let span = i128::try_from(t1 - t0).unwrap_or(i128::MAX);
        let (v0, v1) = (i128::from(v0), i128::from(v1));
        let value = v0 + (v1 - v0) * dt / span;
        // The value lies between v0 and v1, both u64.
        u64::try_from(value).unwrap_or(0)
    }
}

impl Script {
    /// The machine reported when no script is named: one idle H100 with no processes.
    pub(crate) fn default_machine() -> Self {
        Self {
            driver_version: default_driver_version(),
            cuda_driver_version: default_cuda_driver_version(),
            init_error: None,
            devices: vec![DeviceScript {
                name: "NVIDIA H100 80GB HBM3".to_owned(),
                uuid: "GPU-fake-0".to_owned(),
                total_bytes: 80 << 30,
                reserved_bytes: 512 << 20,
                used_bytes: Schedule::constant(0),
                processes: Vec::new(),
            }],
        }
    }

    /// Parses and validates a script's JSON text.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let script: Self = serde_json::from_str(text).map_err(|e| e.to_string())?;
        script.validate()?;
        Ok(script)
    }

    fn validate(&self) -> Result<(), String> {
        if self.init_error == Some(0) {
            return Err("init_error must be a non-zero NVML error code (or null)".to_owned());
        }
        check_c_string(
            "driver_version",
            &self.driver_version,
            NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE,
        )?;
        if self.devices.len() > MAX_DEVICES {
            return Err(format!(
                "{} devices declared; the fake supports at most {MAX_DEVICES}",
                self.devices.len()
            ));
        }
        let mut uuids = HashSet::new();
        for (i, device) in self.devices.iter().enumerate() {
            let at = |what: &str| format!("devices[{i}].{what}");
            check_c_string(&at("name"), &device.name, NVML_DEVICE_NAME_V2_BUFFER_SIZE)?;
            check_c_string(&at("uuid"), &device.uuid, NVML_DEVICE_UUID_V2_BUFFER_SIZE)?;
            if !uuids.insert(device.uuid.as_str()) {
                return Err(format!("{}: {:?} is used twice", at("uuid"), device.uuid));
            }
            let capacity = device
                .total_bytes
                .checked_sub(device.reserved_bytes)
                .ok_or_else(|| format!("{} exceeds total_bytes", at("reserved_bytes")))?;
            if device.used_bytes.max() > capacity {
                return Err(format!(
                    "{} peaks at {} bytes, more than total_bytes - reserved_bytes = {capacity}",
                    at("used_bytes"),
                    device.used_bytes.max()
                ));
            }
            for (j, process) in device.processes.iter().enumerate() {
                if process.used_bytes.max() > capacity {
                    return Err(format!(
                        "{}: peaks at {} bytes, more than total_bytes - reserved_bytes = {capacity}",
                        at(&format!("processes[{j}].used_bytes")),
                        process.used_bytes.max()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Strings go to callers as NUL-terminated C strings in buffers of the NVML-guaranteed size.
fn check_c_string(what: &str, value: &str, buffer_size: u32) -> Result<(), String> {
    if value.contains('\0') {
        return Err(format!("{what} contains a NUL character"));
    }
    if value.len() >= buffer_size as usize {
        return Err(format!(
            "{what} is {} bytes; NVML's buffer for it holds {} plus the terminating NUL",
            value.len(),
            buffer_size - 1
        ));
    }
    Ok(())
}

/// Reads the script named by [`SCRIPT_ENV`], or the default machine when the variable is unset
/// or empty.
pub(crate) fn load_from_env() -> Result<Script, String> {
    match std::env::var_os(SCRIPT_ENV) {
        None => Ok(Script::default_machine()),
        Some(path) if path.is_empty() => Ok(Script::default_machine()),
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("{SCRIPT_ENV}={}: {e}", path.display()))?;
            Script::parse(&text).map_err(|e| format!("{SCRIPT_ENV}={}: {e}", path.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::GIB;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn constant_schedule_holds_everywhere() {
        let s = Schedule::constant(42);
        assert_eq!(s.at(ms(0)), 42);
        assert_eq!(s.at(ms(123_456)), 42);
        assert_eq!(s.max(), 42);
    }

    #[test]
    fn schedule_interpolates_linearly_and_holds_after_the_last_point() {
        let s = Schedule::new(vec![(0, GIB), (2000, 10 * GIB)]).unwrap();
        assert_eq!(s.at(ms(0)), GIB);
        assert_eq!(s.at(ms(1000)), GIB + 9 * GIB / 2);
        assert_eq!(s.at(ms(500)), GIB + 9 * GIB / 4);
        assert_eq!(s.at(ms(2000)), 10 * GIB);
        assert_eq!(s.at(ms(60_000)), 10 * GIB);
        // Sub-millisecond precision: 1 ns into a 2 s ramp of 9 GiB is 4.83 bytes.
        assert_eq!(s.at(Duration::from_nanos(1)), GIB + 4);
        assert_eq!(s.max(), 10 * GIB);
    }

    #[test]
    fn schedule_holds_the_first_value_before_the_first_point() {
        let s = Schedule::new(vec![(1000, 7), (3000, 9)]).unwrap();
        assert_eq!(s.at(ms(0)), 7);
        assert_eq!(s.at(ms(999)), 7);
        assert_eq!(s.at(ms(2000)), 8);
    }

    #[test]
    fn schedule_goes_down_too() {
        let s = Schedule::new(vec![(0, 100), (100, 0)]).unwrap();
        assert_eq!(s.at(ms(25)), 75);
        assert_eq!(s.at(ms(100)), 0);
        assert_eq!(s.at(ms(101)), 0);
    }

    #[test]
    fn equal_times_make_a_step() {
        let s = Schedule::new(vec![(0, 0), (1000, 0), (1000, 500), (2000, 500)]).unwrap();
        assert_eq!(s.at(ms(999)), 0);
        assert_eq!(s.at(ms(1000)), 500);
        assert_eq!(s.at(ms(1500)), 500);
    }

    #[test]
    fn extreme_schedules_do_not_overflow() {
        let s = Schedule::new(vec![(0, 0), (MAX_SCHEDULE_MS, u64::MAX)]).unwrap();
        assert_eq!(s.at(ms(MAX_SCHEDULE_MS / 2)), u64::MAX / 2);
        assert_eq!(s.at(Duration::MAX), u64::MAX);
        let s = Schedule::new(vec![(0, u64::MAX), (MAX_SCHEDULE_MS, 0)]).unwrap();
        assert_eq!(s.at(ms(MAX_SCHEDULE_MS)), 0);
        assert!(s.at(ms(1)) < u64::MAX);
    }

    #[test]
    fn bad_schedules_are_rejected() {
        assert!(Schedule::new(vec![]).is_err());
        assert!(Schedule::new(vec![(10, 1), (5, 2)]).is_err());
        assert!(Schedule::new(vec![(MAX_SCHEDULE_MS + 1, 1)]).is_err());
    }

    const FULL: &str = r#"{
        "driver_version": "580.65.06",
        "cuda_driver_version": 13000,
        "init_error": null,
        "devices": [
            {
                "name": "NVIDIA H100 80GB HBM3",
                "uuid": "GPU-fake-0",
                "total_bytes": 85899345920,
                "reserved_bytes": 536870912,
                "used_bytes": [[0, 1073741824], [2000, 10737418240]],
                "processes": [
                    { "match": "children_of_caller", "used_bytes": [[0, 536870912], [2000, 9663676416]] },
                    { "match": { "pid": 1234 }, "used_bytes": 1048576 }
                ]
            }
        ]
    }"#;

    #[test]
    fn parses_the_documented_example() {
        let script = Script::parse(FULL).unwrap();
        assert_eq!(script.driver_version, "580.65.06");
        assert_eq!(script.cuda_driver_version, 13000);
        assert_eq!(script.init_error, None);
        let device = &script.devices[0];
        assert_eq!(device.name, "NVIDIA H100 80GB HBM3");
        assert_eq!(device.uuid, "GPU-fake-0");
        assert_eq!(device.total_bytes, 80 * GIB);
        assert_eq!(device.reserved_bytes, GIB / 2);
        assert_eq!(device.used_bytes.at(ms(2000)), 10 * GIB);
        assert_eq!(device.processes[0].matcher, Match::ChildrenOfCaller);
        assert_eq!(device.processes[1].matcher, Match::Pid(1234));
        assert_eq!(device.processes[1].used_bytes, Schedule::constant(1 << 20));
    }

    #[test]
    fn memory_snapshot_follows_v2_semantics() {
        let script = Script::parse(FULL).unwrap();
        let m = script.devices[0].memory_at(ms(1000));
        assert_eq!(m.total, 80 * GIB);
        assert_eq!(m.reserved, GIB / 2);
        assert_eq!(m.used, GIB + 9 * GIB / 2);
        assert_eq!(m.free, m.total - m.reserved - m.used);
        assert_eq!(m.used_v1(), m.used + m.reserved);
        assert_eq!(m.used_v1() + m.free, m.total);
    }

    #[test]
    fn everything_but_devices_has_a_default() {
        let script = Script::parse(r#"{"init_error": 9}"#).unwrap();
        assert_eq!(script.init_error, Some(9));
        assert!(script.devices.is_empty());
        assert_eq!(script.driver_version, DEFAULT_DRIVER_VERSION);
        let script =
            Script::parse(r#"{"devices": [{"name": "n", "uuid": "u", "total_bytes": 100}]}"#)
                .unwrap();
        let device = &script.devices[0];
        assert_eq!((device.reserved_bytes, device.used_bytes.max()), (0, 0));
        assert!(device.processes.is_empty());
    }

    #[test]
    fn invalid_scripts_are_rejected() {
        let device = |extra: &str| {
            format!(r#"{{"devices": [{{"name": "n", "uuid": "u", "total_bytes": 100{extra}}}]}}"#)
        };
        for bad in [
            "not json".to_owned(),
            r#"{"init_error": 0}"#.to_owned(),
            r#"{"drivre_version": "1"}"#.to_owned(),
            format!(r#"{{"driver_version": "{}"}}"#, "9".repeat(80)),
            device(r#", "reserved_bytes": 101"#),
            device(r#", "reserved_bytes": 50, "used_bytes": [[0, 10], [5, 51]]"#),
            device(r#", "used_bytes": [[5, 1], [4, 1]]"#),
            device(r#", "used_bytes": []"#),
            device(r#", "used_bytes": -1"#),
            device(r#", "processes": [{"match": "everyone", "used_bytes": 1}]"#),
            device(r#", "processes": [{"match": {"pid": 1}, "used_bytes": 101}]"#),
            device(r#", "processes": [{"match": {"pid": 1}}]"#),
            device(r#", "colour": "green""#),
            r#"{"devices": [{"name": "n", "uuid": "u"}]}"#.to_owned(),
            r#"{"devices": [{"name": "a", "uuid": "u", "total_bytes": 1},
                            {"name": "b", "uuid": "u", "total_bytes": 1}]}"#
                .to_owned(),
            format!(
                r#"{{"devices": [{{"name": "{}", "uuid": "u", "total_bytes": 1}}]}}"#,
                "x".repeat(96)
            ),
        ] {
            assert!(Script::parse(&bad).is_err(), "accepted: {bad}");
        }
        // The longest strings NVML's buffers hold are fine.
        let ok = format!(
            r#"{{"driver_version": "{}", "devices": [{{"name": "{}", "uuid": "{}", "total_bytes": 1}}]}}"#,
            "9".repeat(79),
            "x".repeat(95),
            "u".repeat(95)
        );
        Script::parse(&ok).unwrap();
    }

    #[test]
    fn too_many_devices_are_rejected() {
        let devices: Vec<String> = (0..=MAX_DEVICES)
            .map(|i| format!(r#"{{"name": "n", "uuid": "GPU-{i}", "total_bytes": 1}}"#))
            .collect();
        let text = format!(r#"{{"devices": [{}]}}"#, devices.join(","));
        assert!(Script::parse(&text).is_err());
        let text = format!(r#"{{"devices": [{}]}}"#, devices[1..].join(","));
        assert_eq!(Script::parse(&text).unwrap().devices.len(), MAX_DEVICES);
    }

    #[test]
    fn the_default_machine_is_valid() {
        let script = Script::default_machine();
        script.validate().unwrap();
        assert_eq!(script.devices.len(), 1);
    }
}
