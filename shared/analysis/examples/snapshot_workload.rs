//! The snapshot workload of BENCHMARKS.md: writes a PyTorch memory snapshot pickle of any size in
//! torch's structure and sharing pattern (as `shared/snapshot/tests/data/make_snapshot.py` does, but
//! streamed, so a gigabyte takes seconds and little memory), then reads it back with
//! `snapshot::read_snapshot` and analyses it, timing both.
//!
//! `cargo run --release -p oomscope-analysis --example snapshot_workload -- --out big.pickle --mb 1024`
//!
//! Peak memory is measured on the real command, `/usr/bin/time -v collector summary big.pickle`.
//! The writer emits what CPython's pickler emits for torch's dict in protocol 4 (without `FRAME`s,
//! which are optional): frame dicts memoized once and referred to by `BINGET`/`LONG_BINGET`, one
//! stack list per allocation shared by its free entries and by its block when still live, key
//! strings memoized once, addresses as `LONG1`, the stream pointer as a 9-byte `LONG1`.

// It prints its measurements: that is its output.
#![allow(clippy::print_stdout)]

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use oomscope_analysis::snapshot::analysis::analyze_snapshot;
use oomscope_snapshot::read_snapshot;

/// Writes and reads a large snapshot.
#[derive(Parser)]
struct Args {
    /// Where to write the pickle.
    #[arg(long)]
    out: PathBuf,
    /// About how large to make it, in MiB.
    #[arg(long, default_value_t = 1024)]
    mb: u64,
    /// Frames per stack (torch's Python stacks are often 20–40 deep).
    #[arg(long, default_value_t = 25)]
    depth: usize,
    /// Only write it.
    #[arg(long)]
    no_read: bool,
}

use oomscope_format::units::MIB;
const BASE: u64 = 0x7f3a_0000_0000;
const STREAM: u64 = (1 << 63) + 0x1234;

/// A protocol-4 pickle writer: just the opcodes a snapshot needs.
struct Pickler<W: Write> {
    out: W,
    memo: u32,
    keys: HashMap<&'static str, u32>,
    written: u64,
}

impl<W: Write> Pickler<W> {
    fn op(&mut self, bytes: &[u8]) {
        self.out.write_all(bytes).expect("write");
        self.written += bytes.len() as u64;
    }

    fn memoize(&mut self) -> u32 {
        self.op(&[0x94]);
        self.memo += 1;
        self.memo - 1
    }

    /// `LONG_BINGET`, as a real snapshot refers to most frames: their memo ids pass 255 after the
    /// first entries.
    fn get_long(&mut self, id: u32) {
        let mut b = vec![b'j'];
        b.extend_from_slice(&id.to_le_bytes());
        self.op(&b);
    }

    fn get(&mut self, id: u32) {
        match u8::try_from(id) {
            Ok(small) => self.op(&[b'h', small]),
            Err(_) => {
                let mut b = vec![b'j'];
                b.extend_from_slice(&id.to_le_bytes());
                self.op(&b);
            }
        }
    }

    /// A str, memoized (CPython memoizes every str it writes).
    fn str(&mut self, s: &str) -> u32 {
        let mut b = vec![0x8c, s.len() as u8];
        b.extend_from_slice(s.as_bytes());
        self.op(&b);
        self.memoize()
    }

    /// A str written once, then referred to (keys, actions, the empty str).
    fn key(&mut self, k: &'static str) {
        match self.keys.get(k) {
            Some(id) => {
                let id = *id;
                self.get(id);
            }
            None => {
                let id = self.str(k);
                self.keys.insert(k, id);
            }
        }
    }

    fn int(&mut self, v: u64) {
        if v < 256 {
            self.op(&[b'K', v as u8]);
        } else if v < 65_536 {
            let mut b = vec![b'M'];
            b.extend_from_slice(&(v as u16).to_le_bytes());
            self.op(&b);
        } else if v < (1 << 31) {
            let mut b = vec![b'J'];
            b.extend_from_slice(&(v as u32).to_le_bytes());
            self.op(&b);
        } else {
            let mut bytes = v.to_le_bytes().to_vec();
            while bytes.len() > 1
                && bytes[bytes.len() - 1] == 0
                && bytes[bytes.len() - 2] & 0x80 == 0
            {
                bytes.pop();
            }
            if bytes[bytes.len() - 1] & 0x80 != 0 {
                bytes.push(0);
            }
            let mut b = vec![0x8a, bytes.len() as u8];
            b.extend_from_slice(&bytes);
            self.op(&b);
        }
    }
}

/// The planned run: entries, each allocation's (line, function), what is live, the free pool.
struct Workload {
    plan: Vec<Planned>,
    stacks: Vec<(u64, &'static str)>,
    live: HashMap<u64, (u64, usize)>,
    pool: HashMap<u64, Vec<u64>>,
    next: u64,
}

impl Workload {
    fn alloc(&mut self, size: u64, line: u64, name: &'static str) -> u64 {
        let addr = match self.pool.get_mut(&size).and_then(Vec::pop) {
            Some(a) => a,
            None => {
                self.next += size;
                self.next - size
            }
        };
        self.stacks.push((line, name));
        let index = self.stacks.len() - 1;
        self.live.insert(addr, (size, index));
        self.plan.push(Planned {
            action: "alloc",
            addr,
            size,
            alloc: index,
        });
        addr
    }

    fn free(&mut self, addr: u64) {
        let (size, index) = self.live.remove(&addr).expect("live");
        self.pool.entry(size).or_default().push(addr);
        for action in ["free_requested", "free_completed"] {
            self.plan.push(Planned {
                action,
                addr,
                size,
                alloc: index,
            });
        }
    }
}

/// Frame dicts written so far, and each allocation's stack list once written.
struct Frames {
    torch: Vec<(String, u64, &'static str)>,
    ids: HashMap<(String, u64), u32>,
    stack_ids: Vec<Option<u32>>,
}

impl Frames {
    /// Writes a new stack list (torch's frames, the user's line, the script's top), its frames
    /// referred to when already written; returns its memo id.
    fn write_stack<W: Write>(
        &mut self,
        p: &mut Pickler<W>,
        (line, name): (u64, &'static str),
    ) -> Option<u32> {
        p.op(b"]");
        let id = p.memoize();
        p.op(b"(");
        let user = ("/home/me/train.py".to_owned(), line, name);
        let main = ("/home/me/train.py".to_owned(), 120, "<module>");
        for (file, l, n) in self.torch.iter().cloned().chain([user, main]) {
            match self.ids.get(&(file.clone(), l)) {
                Some(f) => p.get_long(*f),
                None => {
                    p.op(b"}");
                    let f = p.memoize();
                    p.op(b"(");
                    p.key("filename");
                    p.str(&file);
                    p.key("line");
                    p.int(l);
                    p.key("name");
                    p.str(n);
                    p.op(b"u");
                    self.ids.insert((file, l), f);
                }
            }
        }
        p.op(b"e");
        Some(id)
    }
}

/// One planned entry.
#[derive(Clone, Copy)]
struct Planned {
    action: &'static str,
    addr: u64,
    size: u64,
    /// Index of the allocation (its stack).
    alloc: usize,
}

fn main() {
    let args = Args::parse();
    let started = Instant::now();
    let Workload {
        plan,
        stacks,
        live,
        pool,
        next,
    } = planned(&args);
    let file = BufWriter::with_capacity(1 << 20, File::create(&args.out).expect("create"));
    let mut p = Pickler {
        out: file,
        memo: 0,
        keys: HashMap::new(),
        written: 0,
    };
    p.op(&[0x80, 4]);
    p.op(b"}");
    p.memoize();
    p.op(b"(");
    // Frames: a pool of torch frames and the script's lines, each dict written once.
    let torch_frames: Vec<(String, u64, &'static str)> = (0..args.depth.saturating_sub(2))
        .map(|i| {
            (
                format!("/usr/lib/python3.12/site-packages/torch/nn/modules/module{i}.py"),
                100 + i as u64,
                "_call_impl",
            )
        })
        .collect();
    let mut frames = Frames {
        torch: torch_frames,
        ids: HashMap::new(),
        stack_ids: vec![None; stacks.len()],
    };
    write_segments(&mut p, &mut frames, &stacks, &live, &pool, next);
    write_traces(&mut p, &mut frames, &stacks, &plan);
    p.key("allocator_settings");
    p.op(b"}");
    p.memoize();
    p.op(b"(");
    p.key("expandable_segments");
    p.op(&[0x89]);
    p.op(b"u");
    p.op(b"u"); // the top dict
    p.op(b".");
    let written = p.written;
    p.out.flush().expect("flush");
    drop(p);
    println!(
        "wrote {}: {:.1} MiB, {} entries, {} allocations, {} unique frames, in {:.1} s",
        args.out.display(),
        written as f64 / MIB as f64,
        plan.len(),
        stacks.len(),
        frames.ids.len(),
        started.elapsed().as_secs_f64()
    );
    if args.no_read {
        return;
    }
    drop(plan);
    read_back(&args, written);
}

/// The allocations and frees of the run: weights, then steps of 4 activations (freed) and now
/// and then a kept tensor; about 130 bytes per entry at depth 25 (measured; real snapshots:
/// 160-250).
fn planned(args: &Args) -> Workload {
    let entries_wanted = (args.mb * MIB / (65 + args.depth as u64 * 5 / 2)) as usize;
    let mut w = Workload {
        plan: Vec::with_capacity(entries_wanted + 16),
        stacks: Vec::new(),
        live: HashMap::new(),
        pool: HashMap::new(),
        next: BASE,
    };
    w.alloc(512 * MIB, 30, "build_model");
    w.alloc(1024 * MIB, 31, "build_optimizer");
    let mut step = 0u64;
    while w.plan.len() < entries_wanted {
        let acts: Vec<u64> = (0..4)
            .map(|i| w.alloc((64 + 16 * i) * MIB, 50 + i, "forward"))
            .collect();
        // Every 64th step keeps a small tensor: a slow leak.
        if step.is_multiple_of(64) {
            w.alloc(2 * MIB, 77, "train_step");
        }
        for a in acts {
            w.free(a);
        }
        step += 1;
    }
    w
}

/// `segments`: one, its live blocks (their stacks written here first, as torch's are), and the
/// free blocks the pool holds.
fn write_segments(
    p: &mut Pickler<BufWriter<File>>,
    frames: &mut Frames,
    stacks: &[(u64, &'static str)],
    live: &HashMap<u64, (u64, usize)>,
    pool: &HashMap<u64, Vec<u64>>,
    next: u64,
) {
    let used = next - BASE;
    p.key("segments");
    p.op(b"]");
    p.memoize();
    p.op(b"(");
    p.op(b"}");
    p.memoize();
    p.op(b"(");
    let tail = 256 * MIB;
    for (k, v) in [
        ("device", 0),
        ("address", BASE),
        ("total_size", used + tail),
        ("allocated_size", live.values().map(|(s, _)| s).sum()),
        ("stream", STREAM),
    ] {
        p.key(k);
        p.int(v);
    }
    p.key("segment_type");
    p.str("large");
    p.key("is_expandable");
    p.op(&[0x89]);
    p.key("blocks");
    p.op(b"]");
    p.memoize();
    p.op(b"(");
    let mut blocks: Vec<(u64, u64, Option<usize>)> =
        live.iter().map(|(a, (s, i))| (*a, *s, Some(*i))).collect();
    blocks.extend(
        pool.iter()
            .flat_map(|(s, addrs)| addrs.iter().map(|a| (*a, *s, None))),
    );
    blocks.push((next, tail, None));
    blocks.sort_unstable();
    for (addr, size, index) in blocks {
        p.op(b"}");
        p.memoize();
        p.op(b"(");
        p.key("address");
        p.int(addr);
        p.key("size");
        p.int(size);
        p.key("requested_size");
        p.int(if index.is_some() { size } else { 0 });
        p.key("state");
        p.key(if index.is_some() {
            "active_allocated"
        } else {
            "inactive"
        });
        p.key("frames");
        match index {
            Some(i) => frames
                .write_stack(p, stacks[i])
                .map_or((), |id| frames.stack_ids[i] = Some(id)),
            None => {
                p.op(b"]");
                p.memoize();
            }
        }
        p.op(b"u");
    }
    p.op(b"e"); // blocks
    p.op(b"u"); // segment dict
    p.op(b"e"); // segments
}

/// `device_traces`: one device, its entries appended in batches of 1 000 as CPython does.
fn write_traces(
    p: &mut Pickler<BufWriter<File>>,
    frames: &mut Frames,
    stacks: &[(u64, &'static str)],
    plan: &[Planned],
) {
    p.key("device_traces");
    p.op(b"]");
    p.memoize();
    p.op(b"(");
    p.op(b"]");
    p.memoize();
    let mut clock = 1_759_252_584_204_770u64;
    for batch in plan.chunks(1000) {
        p.op(b"(");
        for e in batch {
            clock += 7;
            p.op(b"}");
            p.memoize();
            p.op(b"(");
            p.key("action");
            p.key(e.action);
            p.key("addr");
            p.int(e.addr);
            p.key("size");
            p.int(e.size);
            p.key("stream");
            p.int(STREAM);
            p.key("time_us");
            p.int(clock);
            // Every entry of PyTorch >= 2.1 carries these (the empty str is one object).
            p.key("compile_context");
            p.key("");
            p.key("user_metadata");
            p.key("");
            p.key("frames");
            match frames.stack_ids[e.alloc] {
                Some(id) => p.get(id),
                None => {
                    let id = frames.write_stack(p, stacks[e.alloc]);
                    frames.stack_ids[e.alloc] = id;
                }
            }
            p.op(b"u");
        }
        p.op(b"e");
    }
    p.op(b"e"); // the outer list
}

/// Reads the file back and analyses it, timing each.
fn read_back(args: &Args, written: u64) {
    let t = Instant::now();
    let snap = read_snapshot(File::open(&args.out).expect("open")).expect("reads");
    let read_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let a = analyze_snapshot(&snap);
    let analysis_s = t.elapsed().as_secs_f64();
    println!(
        "read {} entries, {} segments, {} frames, {} stacks in {read_s:.2} s ({:.0} MiB/s); analysis {analysis_s:.2} s; peak active {:.2} GiB; {} findings",
        snap.events(),
        snap.segments.len(),
        snap.frames.len(),
        snap.stacks.len(),
        written as f64 / MIB as f64 / read_s,
        a.devices.first().map_or(0, |d| d.peak_active_bytes) as f64 / (1u64 << 30) as f64,
        a.findings().len()
    );
}
