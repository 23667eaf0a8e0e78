//! Prints what each manifest file given becomes: `cargo run -p cadre-k8s --example plan -- FILE...`.

fn main() {
    let opts = cadre_k8s::TranslateOptions::new("alice", "research", "/tmp");
    for path in std::env::args().skip(1) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                println!("{path}: {e}");
                continue;
            }
        };
        match cadre_k8s::plan(&text, &path, &opts) {
            Err(e) => println!("REFUSED {e}\n"),
            Ok(plan) => {
                for w in &plan.workloads {
                    let groups: Vec<String> = w
                        .spec
                        .groups
                        .iter()
                        .map(|g| {
                            format!(
                                "{} x{}{} (cpus {}, mem {} MiB, gpus {})",
                                g.name,
                                g.count,
                                g.min_count.map(|m| format!(" min {m}")).unwrap_or_default(),
                                g.per_task.cpus,
                                g.per_task.mem_mib,
                                g.per_task.gpus
                            )
                        })
                        .collect();
                    println!("{path}: {} -> {}", w.name, groups.join(", "));
                }
                for q in &plan.queues.queues {
                    println!("{path}: queue {:?}", q.config);
                }
                for l in &plan.queues.local_queues {
                    println!("{path}: local queue {l:?}");
                }
                println!();
            }
        }
    }
}
