/**
 * The REST API's types, generated from its OpenAPI document (server/api/openapi.py)
 * by `python -m jupyter_gpuhive.server.api.typescript`. Do not edit: `make lint` checks
 * that this file is what the generator writes.
 */

/** An administrator's answer to a tentative booking, with an optional reason (the holder reads it). The body may be left out. */
export interface ApprovalAnswer {
  /** Why (told to the holder with the answer) */
  reason?: string | null;
}

/** A budget of a group or a user per period (site admins). */
export interface BudgetBody {
  /** group or user */
  scope: 'group' | 'user';
  /** The group or user */
  name: string;
  /** month, quarter, dates */
  period?: 'month' | 'quarter' | 'dates';
  /** First day (dates) */
  starts?: string | null;
  /** Last day, included */
  ends?: string | null;
  /** GPU-hours per period */
  gpu_hours?: number | null;
  /** kWh per period */
  kwh?: number | null;
  /** What is left moves on */
  carry_over?: boolean;
  /** How far over the allowance bookings may go, in percent (site admins) */
  overdraft_percent?: number;
  /** Percentages at which the holders are warned, once each */
  warn_at?: number[];
  /** The energy a booked GPU-hour counts until it is measured */
  kwh_per_gpu_hour?: number;
}

export interface BudgetDeleted {
  deleted: number;
}

export interface BudgetList {
  budgets: BudgetReply[];
}

export interface BudgetReply {
  id: number;
  scope: string;
  name: string;
  period: string;
  /** used, committed, carried, left per unit; renews_at (null: outside dates) */
  standing: { [key: string]: unknown } | null;
}

/** The kernel's process ended (or is to end now): drop what it used. */
export interface CleanupBody {
  /** true: it starts again at once (keep its sockets) */
  restart?: boolean;
}

/** How the kernel manager reaches the kernel: Unix sockets PREFIX-1 … PREFIX-5. */
export interface Connection {
  /** Always 'ipc' */
  transport: string;
  /** The sockets' prefix, in a 0700 directory of the owner */
  ip: string;
  shell_port: number;
  iopub_port: number;
  stdin_port: number;
  control_port: number;
  hb_port: number;
  /** The kernel's HMAC key (only ever sent to its owner) */
  key: string;
  signature_scheme: string;
}

export interface Deleted {
  deleted: number | boolean;
}

/** My daily digest e-mail on or off (and where it goes). */
export interface DigestSetting {
  enabled: boolean;
  email?: string | null;
}

/** Drain a GPU for maintenance (no new bookings or jobs; holders told), or end a drain. */
export interface DrainBody {
  /** 'host:index' or UUID */
  gpu: string;
  /** true: drain; false: take bookings again */
  drain?: boolean;
  /** shown to users */
  reason?: string | null;
}

/** Every error: one sentence that says what is wrong (and, for some, details). */
export interface ErrorReply {
  message: string;
  /** 409 on a booking: each reservation in the way, per GPU */
  conflicts?: { [key: string]: unknown }[] | null;
}

export interface HostGroupList {
  host_groups: HostGroupReply[];
}

export interface HostGroupReply {
  name: string;
  /** Users who administer the group's hosts */
  admins: string[];
  /** Groups whose members administer them */
  admin_groups: string[];
  /** The group's hosts, as configured */
  hosts: string[];
  /** The limits of each user's bookings there */
  limits: { [key: string]: unknown };
  /** The group's own no-show times (null: site's) */
  noshow: { [key: string]: unknown };
  /** The no-show times that apply there */
  noshow_in_force: { [key: string]: unknown };
  updated_by?: string | null;
  updated_at?: string | null;
  /** A change of limits: reservations newly flagged (reason) or cleared */
  flag_changes?: { [key: string]: string | null } | null;
}

export interface IdentityReply {
  name: string;
  groups: string[];
  admin: boolean;
}

export interface JobEventReply {
  at: string;
  /** preempted, resumed or exhausted (no more borrowing) */
  event: string;
  reservation: number | null;
  detail: string;
  /** A preemption's GPU-hours its run had had (null: not known) */
  gpu_h?: number | null;
}

export interface JobList {
  jobs: JobReply[];
  /** Whether older jobs were left out ('limit') */
  more?: boolean;
}

/** A job: its definition (command, options, ...) only for the owner and admins. */
export interface JobReply {
  id: number;
  name: string;
  owner: string;
  template: string;
  queued: boolean;
  walltime_s: number | null;
  start_at: string | null;
  stop_at: string | null;
  max_retries: number;
  attempts: number;
  preemptible?: boolean;
  preempt_signal?: string;
  grace_s?: number | null;
  /** Times preempted (GPUHIVE_RESTARTS) */
  restarts?: number;
  /** The reservation whose GPUs it runs on */
  lent_from?: number | null;
  history?: JobEventReply[];
  /** Times preempted ('preempted' events) */
  preemptions?: number;
  /** A preempted job's service so far: the GPU-hours of its tasks' runs, those preempted and the current one (null: never preempted, or not known) */
  service_gpu_h?: number | null;
  /** The work a preempted job lost: at each preemption the GPU-hours its run had had since it started (gpuhive does not know the job's last checkpoint, so this is the most it lost; null: never preempted, or not known) */
  lost_gpu_h?: number | null;
  status: TaskState;
  gpus: string[];
  /** Whether the definition is shown */
  detail: boolean;
  tasks: TaskReply[];
  /** A waiting queued job's place in the queue's order (1: next) */
  place?: number | null;
  /** Why a waiting queued job waits */
  waiting_for?: string | null;
  /** A waiting queued job's projected start, as GET queue gives it (an estimate; None: not known, or not a waiting queued job) */
  estimated_start?: string | null;
}

/** My kernels on reservations (admins: everyone's), and the policies I may choose. */
export interface KernelList {
  kernels: KernelReply[];
  /** The end policies the site allows */
  policies: string[];
  /** The site's default end policy */
  default: string;
  /** The site's default fallback of 'extend' */
  fallback: string;
  /** The warning comes this long before the end */
  warning_minutes: number;
}

/** What a kernel does when its reservation ends (within what the admin allows). */
export interface KernelPolicyBody {
  /** warn (keep running), interrupt, shutdown, or extend (extend the reservation when the next slot is free, else the fallback) */
  policy: 'warn' | 'interrupt' | 'shutdown' | 'extend';
  /** With extend: what happens when the slot is taken (default: the site's) */
  fallback?: ('warn' | 'interrupt' | 'shutdown' | 'extend') | null;
}

/** A kernel on a reservation: where it runs, until when, and what happens at the end. */
export interface KernelReply {
  /** The Jupyter kernel id */
  id: string;
  owner: string;
  reservation_id: number;
  host?: string | null;
  gpus?: string[];
  state?: string | null;
  /** The reservation's start (ISO 8601) */
  start?: string | null;
  /** The reservation's end (ISO 8601) */
  end?: string | null;
  /** Until the end, from the server's clock */
  seconds_left?: number | null;
  policy: string;
  fallback: string;
  /** Whether the warning before the end was given */
  warned: boolean;
  /** The latest warnings and end actions, oldest first */
  events?: { [key: string]: unknown }[];
}

/** Start (or, for a kernel already started, restart) a kernel on my reservation. */
export interface LaunchBody {
  /** The reservation whose host and GPUs the kernel uses */
  reservation_id: number;
  /** Which host of a reservation on several (default: most GPUs) */
  host?: string | null;
  /** The kernelspec's environment variables (the service sets the host's GPU pinning variables itself) */
  env?: { [key: string]: unknown } | null;
}

/** The kernel runs: where to connect, and the registry's record of it. */
export interface LaunchReply {
  connection: Connection;
  /** The kernel's record (owner, host, GPUs) */
  kernel: { [key: string]: unknown } | null;
}

export interface LentTo {
  job: number;
  name: string;
  owner: string;
  preemptible: boolean;
}

/** Limits of one scope; null or absent leaves a limit to the next level. */
export interface LimitValues {
  /** GPUs held at once */
  gpus?: number | null;
  /** GPU-hours booked in any rolling 7 days */
  gpu_hours_week?: number | null;
  /** Reservations not yet ended */
  upcoming?: number | null;
  /** The longest reservation */
  longest?: (string | number) | string | null;
  /** How far ahead a reservation may start */
  horizon?: (string | number) | string | null;
}

/** Set the limits of the site default, a group or a user (admins). */
export interface LimitsBody {
  scope: 'default' | 'group' | 'user';
  /** The group's or user's name (not for 'default') */
  name?: string | null;
  limits: LimitValues;
}

export interface LimitsChanged {
  /** Reservations newly flagged (reason) or cleared (null) */
  flag_changes: { [key: string]: string | null };
}

export interface LimitsReply {
  /** The requester's limits, sources and figures */
  mine: { [key: string]: unknown };
  /** Admins: the limits in force */
  table?: { [key: string]: unknown } | null;
  /** Admins: from configuration */
  configured?: { [key: string]: unknown } | null;
}

/** A job from a template: GPUs by name, a current reservation's, or a count (queued). */
export interface NewJob {
  name: string;
  /** Command template with {fields}; kept exactly as sent */
  command: string;
  template?: 'plain' | 'pytorch' | 'tensorflow' | 'tf-clusterspec';
  description?: string;
  gpus?: string[] | null;
  reservation?: number | null;
  /** Template options (GET templates lists them), e.g. gpu_count */
  options?: { [key: string]: unknown } | null;
  /** Where a job that asks for a GPU count (options.gpu_count) may run: all GPUs on one host, waiting for one (required, the default when the count fits the largest host); one host when one can take it, else as few as possible (preferred, the default for bigger jobs); anywhere, fullest hosts first (any). Also accepted in options. */
  same_host?: ('required' | 'preferred' | 'any') | null;
  /** Only this vendor's GPUs (nvidia, amd, or a site's; 422 names the known ones). Also accepted in options. */
  vendor?: string | null;
  /** Only GPUs whose name holds this, any case (A100, MI300X). Also accepted in options. */
  model?: string | null;
  variables?: { [key: string]: unknown } | null;
  /** {'lr': ['0.1', '0.01']} or ['lr=0.1,0.01'] */
  sweep?: { [key: string]: unknown } | string[] | null;
  env?: { [key: string]: unknown } | null;
  workdir?: string | null;
  queued?: boolean;
  walltime?: (string | number) | string | null;
  start_at?: string | null;
  stop_at?: string | null;
  max_retries?: number;
  /** Run now */
  start?: boolean;
  /** Run each task in this container image (the host's allow-list decides) */
  image?: string | null;
  /** Container jobs: host paths to mount, among those the host allows */
  mounts?: string[] | null;
  /** Queued jobs: may also run on GPUs reservations lend, and is stopped (after preempt_signal and grace_s) and requeued when the holder takes them back */
  preemptible?: boolean;
  preempt_signal?: 'SIGTERM' | 'SIGINT' | 'SIGUSR1' | 'SIGUSR2';
  /** Seconds to checkpoint after the signal (null: the site's; 422 above it) */
  grace_s?: number | null;
}

/** Book GPUs from `start` (default: now) to `end`, or for `duration`. */
export interface NewReservation {
  title: string;
  /** GPUs ('host:index' or UUID) and MIG slices ('host:index/migGI' or MIG UUID); a whole GPU holds all of its slices */
  gpus: string[];
  description?: string | null;
  start?: string | null;
  end?: string | null;
  duration?: (string | number) | string | null;
  /** Admins only: book for someone else */
  owner?: string | null;
  /** Preemptible jobs may use its GPUs while the holder has no process on them, and give them back when the holder starts (false: never lend my GPUs) */
  lend?: boolean;
  /** Take lent GPUs back the site's reclaim_before_start_s before the start */
  reclaim_before_start?: boolean;
  share?: (number | string) | null;
  memory?: (string | number) | null;
}

/** Tell me when `gpus` GPUs (on `host`, of `model`) are free for `duration`. */
export interface NewSubscription {
  /** A duration: '90s', '15m', '2h', '1d', '1w', or a number of seconds. */
  duration: string | number;
  gpus?: number;
  /** Only this host */
  host?: string | null;
  /** GPU model contains this */
  model?: string | null;
  deadline?: string | null;
  /** How to tell you; default: every channel that reaches you here (the Lab; e-mail when the site sends mail; a webhook when you have one for gpus.available) */
  channels?: (('lab' | 'email' | 'webhook')[]) | null;
  email?: string | null;
  repeat?: boolean;
}

/** A webhook endpoint; 'site' (admins only) gets everyone's events. */
export interface NewWebhook {
  url: string;
  format?: 'json' | 'slack';
  events?: ('reservation.created' | 'reservation.changed' | 'reservation.cancelled' | 'reservation.starting' | 'reservation.ending' | 'reservation.tentative' | 'reservation.approved' | 'reservation.declined' | 'reservation.expired' | 'gpus.available' | 'job.started' | 'job.succeeded' | 'job.failed' | 'job.preempted' | 'violation' | 'gpu.health' | 'budget.warning' | '*')[];
  /** Admins only: everyone's events */
  site?: boolean;
}

/** The no-show times on a host group's hosts; null or absent: the site's. */
export interface NoShowBody {
  /** A booking nobody used this long after it began is a no-show (0 or 'off': not watched on these hosts) */
  after?: ((string | number) | (0 | '0' | 'off')) | string | null;
  /** How much later a no-show is released */
  release_after?: (string | number) | string | null;
}

export interface Preview {
  tasks: PreviewTask[];
}

export interface PreviewTask {
  index: number;
  host: string;
  gpus: string[];
  role: string;
  env: { [key: string]: string };
  command: string;
  /** The exact command line run on the host */
  shell: string;
}

/** The kernel's process as the service sees it. */
export interface ProcessReply {
  running: boolean;
  /** null while it runs */
  exit_status: number | null;
  /** starting, running, restarting, dead or ended */
  state: string;
  /** Why it died or ended */
  reason: string | null;
}

export interface QueueList {
  jobs: QueuedJobReply[];
}

/** A waiting queued job with its projected start. */
export interface QueuedJobReply {
  id: number;
  name: string;
  owner: string;
  template: string;
  queued: boolean;
  walltime_s: number | null;
  start_at: string | null;
  stop_at: string | null;
  max_retries: number;
  attempts: number;
  preemptible?: boolean;
  preempt_signal?: string;
  grace_s?: number | null;
  /** Times preempted (GPUHIVE_RESTARTS) */
  restarts?: number;
  /** The reservation whose GPUs it runs on */
  lent_from?: number | null;
  history?: JobEventReply[];
  /** Times preempted ('preempted' events) */
  preemptions?: number;
  /** A preempted job's service so far: the GPU-hours of its tasks' runs, those preempted and the current one (null: never preempted, or not known) */
  service_gpu_h?: number | null;
  /** The work a preempted job lost: at each preemption the GPU-hours its run had had since it started (gpuhive does not know the job's last checkpoint, so this is the most it lost; null: never preempted, or not known) */
  lost_gpu_h?: number | null;
  status: TaskState;
  gpus: string[];
  /** Whether the definition is shown */
  detail: boolean;
  tasks: TaskReply[];
  /** A waiting queued job's place in the queue's order (1: next) */
  place?: number | null;
  /** Why a waiting queued job waits */
  waiting_for?: string | null;
  /** A waiting queued job's projected start, as GET queue gives it (an estimate; None: not known, or not a waiting queued job) */
  estimated_start?: string | null;
}

export interface ReclaimReply {
  /** The jobs signalled (or on their way out) */
  reclaimed: number[];
  /** When the GPUs are free at the latest */
  free_by: string;
}

export interface ReportReply {
  months: string[];
  timezone: string;
  rows: { [key: string]: unknown }[];
  check: { [key: string]: unknown };
}

/** Only these fields can change; any other field is refused (400). Leave a field out to keep it; null is refused, except for the description (null: unchanged). */
export interface ReservationChange {
  title?: string;
  description?: string | null;
  start?: string;
  end?: string;
  /** A duration: '90s', '15m', '2h', '1d', '1w', or a number of seconds. */
  duration?: string | number;
  /** GPUs ('host:index' or UUID) and MIG slices ('host:index/migGI' or MIG UUID); a whole GPU holds all of its slices */
  gpus?: string[];
  /** Preemptible jobs may use its GPUs while the holder has no process on them, and give them back when the holder starts (false: never lend my GPUs) */
  lend?: boolean;
  /** Take lent GPUs back the site's reclaim_before_start_s before the start */
  reclaim_before_start?: boolean;
  share?: (number | string) | null;
  memory?: (string | number) | null;
}

export interface ReservationList {
  reservations: ReservationReply[];
}

export interface ReservationReply {
  id: number;
  owner: string;
  title: string;
  /** Shown to the owner and admins (or everyone, if the site says so) */
  description?: string | null;
  start: string;
  end: string;
  /** 'host:index' of each GPU, 'host:index/migGI' of each MIG slice */
  gpus: string[];
  gpu_uuids: string[];
  created_at: string;
  cancelled_at: string | null;
  status: ReservationStatus;
  flagged: boolean;
  flag_reason: string | null;
  /** Hosts of its GPUs that are no longer configured (removed from the hosts file or the configuration): those GPUs are not monitored and cannot run kernels */
  hosts_gone?: string[];
  /** Whether preemptible jobs may use its idle GPUs */
  lend?: boolean;
  reclaim_before_start?: boolean;
  /** Preemptible jobs that run on its GPUs now */
  lent_to?: LentTo[];
  /** The share of its one GPU it holds (1: whole GPUs; a share is of one GPU) */
  share?: number;
  /** The GPU memory its share holds, in MiB (null: whole GPUs, or the GPU's memory is unknown) */
  share_memory_mib?: number | null;
  /** It waits for an administrator's approval: its slot is held, but no job or kernel may run on it until it is approved (docs/how-to/approvals.md) */
  tentative?: boolean;
  /** While tentative: when its hold ends if nobody answers (released) */
  tentative_until?: string | null;
  /** While tentative: whether the requester may approve or decline it */
  may_approve?: boolean;
}

/** Where a reservation is at an instant: cancelled, upcoming, active or ended. */
export type ReservationStatus = 'cancelled' | 'upcoming' | 'active' | 'ended';

/** An access rule: subjects (users, '*' for everyone, groups) x resources (hosts, GPUs; none: all) x weekly windows (none: always) x validity dates, in the site's time zone. */
export interface RuleBody {
  name?: string;
  users?: string[] | null;
  groups?: string[] | null;
  hosts?: string[] | null;
  gpus?: string[] | null;
  windows?: RuleWindow[] | null;
  valid_from?: string | null;
  valid_until?: string | null;
}

export interface RuleChanged {
  id: number | null;
  name: string;
  users: string[];
  groups: string[];
  hosts: string[];
  gpus: string[];
  windows: WindowReply[];
  valid_from: string | null;
  valid_until: string | null;
  /** Reservations (by id) whose flag changed: the new reason, or null */
  flag_changes: { [key: string]: string | null };
}

export interface RuleDeleted {
  deleted: number;
  flag_changes: { [key: string]: string | null };
}

export interface RuleList {
  rules: RuleReply[];
}

export interface RuleReply {
  id: number | null;
  name: string;
  users: string[];
  groups: string[];
  hosts: string[];
  gpus: string[];
  windows: WindowReply[];
  valid_from: string | null;
  valid_until: string | null;
}

/** A weekly window: days (names, ranges such as 'mon-fri', or 0-6) and local times. */
export interface RuleWindow {
  days?: (string | number) | ((string | number)[]);
  start?: string;
  end?: string;
}

export interface ScoresReply {
  start: string;
  end: string;
  scores: { [key: string]: unknown }[];
}

/** A signal for the kernel's process group on its host. */
export interface SignalBody {
  /** e.g. SIGINT (interrupt) */
  signal: 'SIGINT' | 'SIGTERM' | 'SIGKILL' | 'SIGHUP' | 'SIGQUIT' | 'SIGUSR1' | 'SIGUSR2';
}

/** A site feed: every reservation, or one host's. */
export interface SiteFeed {
  /** Only this host's GPUs (absent, null or empty: every host) */
  host?: string | null;
}

export interface SlotReply {
  start: string;
  end: string;
  /** What to book: POST reservations with these GPUs */
  gpus: string[];
  hosts: string[];
  /** Lower is better: free slices left on the same GPUs, free units on the hosts */
  fragmentation: { [key: string]: number };
  /** The share of its one GPU to book (1: whole GPUs); POST it with 'gpus' */
  share?: number;
  /** The GPU memory that share holds, in MiB (null: whole GPUs) */
  share_memory_mib?: number | null;
}

/** A count of GPUs (or of MIG slices, or slices of a profile) for a duration, with constraints, between `not_before` (default now) and `deadline` (default: the booking horizon). Any other field is refused (400). */
export interface SlotSearchBody {
  /** How many units; with 'indices' it defaults to their number */
  count?: number | null;
  /** A duration: '90s', '15m', '2h', '1d', '1w', or a number of seconds. */
  duration: string | number;
  /** Count MIG slices instead of whole GPUs */
  slices?: boolean;
  /** Only MIG slices of this profile, e.g. '1g.10gb' (implies slices) */
  profile?: string | null;
  not_before?: string | null;
  /** The slot must end by then */
  deadline?: string | null;
  same_host?: boolean;
  /** Every pair NVLink-connected (implies same host) */
  nvlink?: boolean;
  /** All on one NUMA node (implies same host) */
  same_numa?: boolean;
  /** A part of the GPU model name, any case, e.g. 'A100' */
  model?: string | null;
  /** Only this vendor's GPUs: nvidia, amd (422 names the known ones) */
  vendor?: string | null;
  min_memory_mib?: number | null;
  /** Only these GPU indices, on one host (implies same host) */
  indices?: number[] | null;
  host?: string | null;
  /** How many answers */
  limit?: number;
  share?: (number | string) | null;
  memory?: (string | number) | null;
}

export interface SlotSearchReply {
  /** Earliest first, then least fragmentation */
  slots: SlotReply[];
  not_before: string;
  deadline: string;
}

export interface StatementReply {
  budget: { [key: string]: unknown };
  standing: { [key: string]: unknown };
  /** user, host, kind, gpu_hours, kwh */
  rows: { [key: string]: unknown }[];
}

export interface TaskReply {
  id: number;
  job: number;
  index: number;
  owner: string;
  host: string;
  role: string;
  /** GPU UUIDs */
  gpus: string[];
  gpu_indices: number[];
  state: TaskState;
  exit_status: number | null;
  started_at: string | null;
  ended_at: string | null;
}

/** Where a task is in its life; the launcher moves it, `sync` confirms it. */
export type TaskState = 'pending' | 'starting' | 'running' | 'succeeded' | 'failed' | 'stopping' | 'stopped' | 'lost';

/** Below `efficiency_below` percent efficiency, `limit` is multiplied by `factor`. */
export interface TierValue {
  efficiency_below: number;
  limit?: 'gpus' | 'gpu_hours_week' | 'upcoming';
  factor?: number;
}

/** Replace the tiers (admins); an empty list turns configured tiers off. */
export interface TiersBody {
  tiers: TierValue[];
}

export interface WindowReply {
  days: string[];
  start: string;
  end: string;
}
