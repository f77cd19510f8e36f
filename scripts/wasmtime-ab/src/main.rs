//! Bare wasmtime, one version or another (see `../wasmtime-ab.sh`): warm and idle async calls,
//! with epoch interruption, of the echo fixture's `execute`, through bindings of contract
//! 0.3.0. No llm-worker code is involved: this measures wasmtime alone.
use std::hint::black_box;
use std::time::{Duration, Instant};
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

mod bare {
    wasmtime::component::bindgen!({
        path: "../../wit/0.3.0",
        world: "tool-plugin",
        imports: {
            "llm-worker:tool/client.elicit": async,
            "llm-worker:tool/client.sample": async,
            "llm-worker:tool/client.roots": async,
        },
        exports: { default: async },
    });
}
use bare::llm_worker::tool::{client, host};

struct S {
    wasi: WasiCtx,
    table: ResourceTable,
}
impl host::Host for S {
    fn log(&mut self, _: host::Level, _: String) {}
    fn progress(&mut self, _: f64, _: Option<f64>, _: Option<String>) {}
    fn resource_updated(&mut self, _: String) {}
    fn list_changed(&mut self, _: host::Listing) {}
}
impl client::Host for S {
    async fn elicit(
        &mut self,
        _: String,
        _: String,
        _: String,
    ) -> Result<client::ElicitationAnswer, client::QuestionError> {
        Err(client::QuestionError::Unsupported(String::new()))
    }
    async fn sample(
        &mut self,
        _: String,
        _: client::SamplingRequest,
    ) -> Result<client::SamplingAnswer, client::QuestionError> {
        Err(client::QuestionError::Unsupported(String::new()))
    }
    async fn roots(&mut self, _: String) -> Result<Vec<client::Root>, client::QuestionError> {
        Err(client::QuestionError::Unsupported(String::new()))
    }
}
impl WasiView for S {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn main() {
    let path = std::env::args().nth(1).expect("echo.wasm");
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    let engine = Engine::new(&config).unwrap();
    let mut linker: Linker<S> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    host::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
    client::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
    let component = wasmtime::component::Component::from_file(&engine, &path).unwrap();
    let pre = bare::ToolPluginPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
    let mut store = Store::new(
        &engine,
        S {
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
        },
    );
    store.set_epoch_deadline(u64::MAX / 2);
    let input = format!(r#"{{"text":"{}"}}"#, "x".repeat(82));
    futures::executor::block_on(async {
        let plugin = pre.instantiate_async(&mut store).await.unwrap();
        plugin.call_tools(&mut store).await.unwrap();
        let mut echo = async || {
            black_box(
                plugin
                    .call_execute(&mut store, "echo", &input)
                    .await
                    .unwrap()
                    .ok(),
            );
        };
        // warm: 21 samples of 20,000 calls
        let mut samples = Vec::new();
        for round in 0..22 {
            let start = Instant::now();
            for _ in 0..20_000 {
                echo().await;
            }
            if round > 0 {
                samples.push(start.elapsed() / 20_000);
            }
        }
        samples.sort();
        // idle: 2,000 calls after 250 µs each
        let mut idle: Vec<Duration> = Vec::new();
        for _ in 0..2000 {
            std::thread::sleep(Duration::from_micros(250));
            let start = Instant::now();
            echo().await;
            idle.push(start.elapsed());
        }
        idle.sort();
        println!(
            "{} warm median {:?} | idle p50 {:?} p90 {:?}",
            env!("CARGO_PKG_NAME"),
            samples[10],
            idle[1000],
            idle[1800]
        );
    });
}
