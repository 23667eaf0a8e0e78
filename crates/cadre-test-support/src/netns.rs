//! Hosts of a cluster across machines, made of Linux network namespaces on this one: a
//! [`Network`] of `n` hosts, each a namespace of its own with one interface (`eth0`,
//! `10.231.0.<i+1>/24`) joined by a veth pair to a bridge in a hub namespace. The addresses
//! exist only inside these namespaces: nothing of the machine's own network is touched,
//! and several networks (tests running at once) each have their own bridge.
//!
//! Processes run on a host through `nsenter --net` ([`Network::command`]): in its network
//! namespace only, so they see the machine's mounts (the cgroup hierarchy among them) and
//! share its files (as hosts with a shared filesystem do) and its clock, so tasks on
//! different hosts can stamp one file with one clock. Faults come from nftables inside a
//! host's namespace ([`Network::cut`], [`Network::drop_randomly`], [`Network::heal`]):
//! `tc netem` is not available on every kernel this runs on.
//!
//! Needs root, iproute2's `ip` and nftables' `nft`; [`Network::new`] says why it cannot be
//! made where it cannot. Everything is removed when the network is dropped (the veth pairs
//! with their namespaces).

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// The first three octets of every host's address.
const SUBNET: [u8; 3] = [10, 231, 0];

/// Networks made by this process so far, for unique namespace names.
static MADE: AtomicU32 = AtomicU32::new(0);

/// One host: a network namespace and its address.
#[derive(Clone, Debug)]
pub struct Host {
    /// The namespace's name (`ip netns exec NAME`).
    pub ns: String,
    pub addr: Ipv4Addr,
}

/// Hosts on one bridge; removed when dropped.
#[derive(Debug)]
pub struct Network {
    hub: String,
    hosts: Vec<Host>,
}

impl Network {
    /// `n` hosts (at most 250), host `i` at `10.231.0.<i+1>`; `Err` says why this machine
    /// cannot make them (not root, no `ip` or `nft`, no network namespaces).
    pub fn new(n: usize) -> Result<Network, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("network namespaces need root".into());
        }
        if n == 0 || n > 250 {
            return Err(format!("{n} hosts: between 1 and 250"));
        }
        for (tool, version) in [("ip", "-V"), ("nft", "--version")] {
            let found = Command::new(tool)
                .arg(version)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !found {
                return Err(format!(
                    "no `{tool}` (Debian's iproute2 and nftables) on this machine"
                ));
            }
        }
        let prefix = format!(
            "cadre{}n{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        );
        let mut net = Network {
            hub: format!("{prefix}-hub"),
            hosts: Vec::new(),
        };
        ip(&["netns", "add", &net.hub])?;
        ip(&["-n", &net.hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &net.hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &net.hub, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let host = Host {
                ns: format!("{prefix}-h{i}"),
                addr: Ipv4Addr::new(SUBNET[0], SUBNET[1], SUBNET[2], (i + 1) as u8),
            };
            ip(&["netns", "add", &host.ns])?;
            net.hosts.push(host.clone());
            let port = format!("p{i}");
            ip(&[
                "link", "add", "eth0", "netns", &host.ns, "type", "veth", "peer", "name", &port,
                "netns", &net.hub,
            ])?;
            ip(&["-n", &net.hub, "link", "set", &port, "master", "br0", "up"])?;
            let cidr = format!("{}/24", host.addr);
            ip(&["-n", &host.ns, "addr", "add", &cidr, "dev", "eth0"])?;
            ip(&["-n", &host.ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &host.ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// `program` run on host `i`.
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        // `nsenter` into the network namespace alone: `ip netns exec` would also give the
        // program a mount namespace with `/sys` mounted again, where the cgroup hierarchy
        // is not, and an agent there could make no task cgroups.
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}", self.hosts[i].ns))
            .arg("--")
            .arg(program);
        cmd
    }

    /// Host `i` loses the network: everything in or out of `eth0` is dropped (its own
    /// loopback still works), as when its link or its switch port fails.
    pub fn cut(&self, i: usize) {
        self.rules(
            i,
            "table inet cadre_fault {\n\
             chain input { type filter hook input priority 0; policy accept; iifname \"eth0\" drop; }\n\
             chain output { type filter hook output priority 0; policy accept; oifname \"eth0\" drop; }\n\
             }\n",
        );
    }

    /// Host `i` drops `percent` of the packets it receives and sends, at random.
    pub fn drop_randomly(&self, i: usize, percent: u8) {
        let percent = percent.min(100);
        self.rules(
            i,
            &format!(
                "table inet cadre_fault {{\n\
                 chain input {{ type filter hook input priority 0; policy accept; iifname \"eth0\" numgen random mod 100 < {percent} drop; }}\n\
                 chain output {{ type filter hook output priority 0; policy accept; oifname \"eth0\" numgen random mod 100 < {percent} drop; }}\n\
                 }}\n"
            ),
        );
    }

    /// Host `i`'s network works again.
    pub fn heal(&self, i: usize) {
        let out = self
            .command(i, "nft")
            .args(["delete", "table", "inet", "cadre_fault"])
            .output()
            .expect("nft runs");
        assert!(
            out.status.success(),
            "nft delete on host {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn rules(&self, i: usize, ruleset: &str) {
        use std::io::Write;
        let mut nft = self
            .command(i, "nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("nft runs");
        nft.stdin
            .take()
            .expect("stdin")
            .write_all(ruleset.as_bytes())
            .expect("the rules are written");
        let out = nft.wait_with_output().expect("nft ends");
        assert!(
            out.status.success(),
            "nft on host {i}: {}\n{ruleset}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for host in &self.hosts {
            let _ = ip(&["netns", "del", &host.ns]);
        }
        let _ = ip(&["netns", "del", &self.hub]);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
