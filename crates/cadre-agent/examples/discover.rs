//! Prints what discovery finds on this machine: `cargo run -p cadre-agent --example discover [GPUS]`.

fn main() {
    let gpus = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let opts = cadre_agent::discovery::DiscoveryOptions {
        emulate_gpus: gpus,
        ..Default::default()
    };
    match cadre_agent::discovery::discover(&opts) {
        Ok(d) => {
            for line in &d.report {
                println!("{line}");
            }
            println!("{:?}", d.shape);
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
