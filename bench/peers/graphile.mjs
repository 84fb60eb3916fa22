// The bench's 8-step DAG on Graphile Worker (graphile-worker 0.18, npm), on the same server as
// `workdo bench`: descriptive-metadata → (google-convert, google-download) → process-content →
// (shelve, publish) → sdr-ingest-transfer → cleanup, for N workflows.
//
// Graphile Worker is a job queue, not a workflow engine: the DAG is kept in two tables of our own.
// A step's job, in one transaction, records its run (primary key (wf, step): a second run of a
// step fails) and counts down its successors' prerequisites, adding the job of each that reaches
// zero. The exactly-once check at the end: 8·N runs recorded, no job left, none failed or retried.
//
//   node graphile.mjs DATABASE_URL WORKFLOWS [CONCURRENCY] [--local-queue]
// prints one JSON line: {"peer":"graphile-worker",...,"steps_per_sec":…}

import { Logger, run } from "graphile-worker";
import pg from "pg";

const [url, n = "2000", concurrency = "10"] = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const localQueue = process.argv.includes("--local-queue");
if (!url) {
  console.error("usage: node graphile.mjs DATABASE_URL WORKFLOWS [CONCURRENCY] [--local-queue]");
  process.exit(2);
}
const N = Number(n);
const DAG = {
  "descriptive-metadata": [],
  "google-convert": ["descriptive-metadata"],
  "google-download": ["descriptive-metadata"],
  "process-content": ["google-convert", "google-download"],
  shelve: ["process-content"],
  publish: ["process-content"],
  "sdr-ingest-transfer": ["shelve", "publish"],
  cleanup: ["sdr-ingest-transfer"],
};
const successors = {};
for (const [step, prereqs] of Object.entries(DAG)) {
  for (const p of prereqs) (successors[p] ??= []).push(step);
}

// Quiet: a log line per job would be the bench.
const logger = new Logger(() => () => {});
const pool = new pg.Pool({ connectionString: url, max: 4 });
await pool.query(`
  drop schema if exists graphile_worker cascade;
  drop schema if exists peer_dag cascade;
  create schema peer_dag;
  create table peer_dag.runs (wf int, step text, primary key (wf, step));
  create table peer_dag.pending (wf int, step text, pending int not null, primary key (wf, step));
`);
const runner0 = await run({
  connectionString: url,
  concurrency: 1,
  noHandleSignals: true,
  logger,
  taskList: { step: async () => {} },
});
await runner0.stop(); // the schema migrated
for (const [step, prereqs] of Object.entries(DAG)) {
  await pool.query(
    "insert into peer_dag.pending select g, $1, $2 from generate_series(1, $3) g",
    [step, prereqs.length, N],
  );
}
await pool.query(
  `select graphile_worker.add_jobs(array_agg(
     row('step', json_build_object('wf', g, 'step', 'descriptive-metadata'),
         null, null, null, null, null, null)::graphile_worker.job_spec))
     from generate_series(1, $1) g`,
  [N],
);

const step = async (payload, helpers) => {
  const { wf, step } = payload;
  await helpers.withPgClient(async (c) => {
    await c.query("begin");
    try {
      await c.query("insert into peer_dag.runs values ($1, $2)", [wf, step]);
      for (const next of successors[step] ?? []) {
        const r = await c.query(
          "update peer_dag.pending set pending = pending - 1 where wf = $1 and step = $2 returning pending",
          [wf, next],
        );
        if (r.rows[0].pending === 0) {
          await c.query("select graphile_worker.add_job('step', json_build_object('wf', $1::int, 'step', $2::text))", [wf, next]);
        }
      }
      await c.query("commit");
    } catch (e) {
      await c.query("rollback");
      throw e;
    }
  });
};

const began = performance.now();
const runner = await run({
  connectionString: url,
  concurrency: Number(concurrency),
  noHandleSignals: true,
  logger,
  pollInterval: 1000,
  taskList: { step },
  preset: localQueue
    ? { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } }
    : undefined,
});
let done = 0;
while (done < 8 * N) {
  await new Promise((r) => setTimeout(r, 20));
  done = Number((await pool.query("select count(*) from peer_dag.runs")).rows[0].count);
}
const secs = (performance.now() - began) / 1000;
await runner.stop();
const left = Number((await pool.query("select count(*) from graphile_worker.jobs")).rows[0].count);
const retried = Number(
  (await pool.query("select count(*) from graphile_worker.jobs where attempts > 1 or last_error is not null")).rows[0].count,
);
await pool.end();
const ok = done === 8 * N && left === 0 && retried === 0;
console.log(
  JSON.stringify({
    peer: localQueue ? "graphile-worker (local queue 500)" : "graphile-worker",
    workflows: N,
    steps: done,
    concurrency: Number(concurrency),
    secs: Number(secs.toFixed(3)),
    steps_per_sec: Math.round(done / secs),
    exactly_once: ok,
    jobs_left: left,
  }),
);
if (!ok) process.exit(1);
