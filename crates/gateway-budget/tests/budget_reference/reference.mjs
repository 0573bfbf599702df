// A transcription of the TypeScript reference `src/orch/retry-budget.ts` in seed document 002
// (shared/seeds/002_abe386b07c4b70b4.txt, 《互联网产品的 AI 架构·多能力编排与任务闭环》5.3), by
// hand into plain JavaScript because no TypeScript compiler is installed: the type annotations,
// interfaces and `readonly`/`private` modifiers are gone, and `AiError` (imported from
// "../core/errors.ts" in the seed, which the seed does not show) is a minimal stand-in. Every
// statement, arithmetic expression, operation order, rounding call and message is the seed's,
// unchanged. Do not "improve" it: it is the oracle of tests/budget_reference.rs.

export class AiError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

function fail(message) {
  throw new AiError("invalid-request", `retry-budget: ${message}`);
}

function integer(value, field, min = 0) {
  if (!Number.isInteger(value) || value < min) fail(`${field} 必须是 >= ${min} 的整数`);
  return value;
}

function validateNodes(nodes) {
  if (nodes.length === 0) fail("至少需要一个节点");
  const ids = new Set();
  for (const node of nodes) {
    if (node.id.trim() === "") fail("node.id 不能为空");
    if (ids.has(node.id)) fail(`重复的 node.id ${node.id}`);
    ids.add(node.id);
    if (!(node.failureRate >= 0 && node.failureRate < 1)) fail(`${node.id}.failureRate 必须落在 [0, 1)`);
    integer(node.attemptCostMicros, `${node.id}.attemptCostMicros`);
    if (!Number.isFinite(node.latencyMs) || node.latencyMs < 0) fail(`${node.id}.latencyMs 必须 >= 0`);
    integer(node.maxRetries, `${node.id}.maxRetries`);
  }
}

function validatePolicy(policy) {
  integer(policy.globalRetryBudget, "globalRetryBudget");
  const threshold = policy.consecutiveFailureThreshold;
  if (threshold !== Number.POSITIVE_INFINITY && (!Number.isInteger(threshold) || threshold < 1)) {
    fail("consecutiveFailureThreshold 必须是 >= 1 的整数或 Infinity");
  }
  integer(policy.halfOpenAfterCalls, "halfOpenAfterCalls", 1);
}

/** 闭合上限：本地重试次数与「熔断前允许的连续尝试」取小。 */
export function retryCap(node, policy) {
  const breakerCap = policy.consecutiveFailureThreshold === Number.POSITIVE_INFINITY
    ? node.maxRetries
    : Math.max(0, policy.consecutiveFailureThreshold - 1);
  return Math.min(node.maxRetries, breakerCap);
}

function expectedAttempts(failureRate, retries) {
  if (failureRate === 0) return 1;
  return (1 - Math.pow(failureRate, retries + 1)) / (1 - failureRate);
}

/**
 * 分配目标是「多一次重试能多救回多少成功率」，不是「谁更便宜」。
 * 必需节点先于可选节点：可选节点再高的失败率也不影响整链是否成功。
 */
export function planRetryBudget(
  nodes,
  policy,
) {
  validateNodes(nodes);
  validatePolicy(policy);
  const caps = nodes.map((node) => retryCap(node, policy));
  const retries = nodes.map(() => 0);
  let remaining = policy.globalRetryBudget;

  while (remaining > 0) {
    let pick = -1;
    let bestGain = 0;
    let bestCost = Number.POSITIVE_INFINITY;

    // 必需节点优先：只有必需节点没有可分配额度时才考虑可选节点。
    for (const requiredPass of [true, false]) {
      nodes.forEach((node, index) => {
        if (node.required !== requiredPass) return;
        if (retries[index] >= caps[index] || node.failureRate === 0) return;
        const current = retries[index];
        // 第 current+1 次重试把失败率从 f^(current+1) 降到 f^(current+2)。
        const gain = Math.pow(node.failureRate, current + 1) * (1 - node.failureRate);
        const cost = node.attemptCostMicros * Math.pow(node.failureRate, current + 1);
        if (gain > bestGain || (gain === bestGain && cost < bestCost)) {
          pick = index;
          bestGain = gain;
          bestCost = cost;
        }
      });
      if (pick >= 0) break;
    }

    if (pick < 0) break;
    retries[pick] += 1;
    remaining -= 1;
  }

  let chainSuccess = 1;
  let optionalSuccess = 1;
  let expectedCost = 0;
  let attemptsTotal = 0;
  let expectedLatency = 0;
  const allocations = nodes.map((node, index) => {
    const retryCount = retries[index];
    const attempts = expectedAttempts(node.failureRate, retryCount);
    const success = 1 - Math.pow(node.failureRate, retryCount + 1);
    const cost = node.attemptCostMicros * attempts;
    expectedCost += cost;
    attemptsTotal += attempts;
    expectedLatency += node.latencyMs * attempts;
    if (node.required) chainSuccess *= success;
    else optionalSuccess *= success;
    return {
      nodeId: node.id,
      retries: retryCount,
      retryCap: caps[index],
      effectiveFailureRate: Number(Math.pow(node.failureRate, retryCount + 1).toFixed(8)),
      expectedAttempts: Number(attempts.toFixed(6)),
      successProbability: Number(success.toFixed(8)),
      expectedCostMicros: Math.round(cost),
    };
  });

  const totalCost = Math.round(expectedCost);
  return {
    allocations,
    retriesUsed: retries.reduce((sum, value) => sum + value, 0),
    chainSuccess: Number(chainSuccess.toFixed(8)),
    expectedCostMicros: totalCost,
    costPerSuccessMicros: chainSuccess === 0
      ? Number.POSITIVE_INFINITY
      : Math.round(totalCost / chainSuccess),
    expectedLatencyMs: Math.round(expectedLatency),
    retryAmplification: Number((attemptsTotal / nodes.length).toFixed(4)),
    partialProbability: Number((1 - optionalSuccess).toFixed(8)),
    breakerCapped: nodes
      .filter((node, index) => caps[index] < node.maxRetries)
      .map((node) => node.id),
  };
}

/**
 * 尾部上界：把可用重试全部给单次成本最高的节点。
 * 期望值回答「平时多少钱」，尾部上界回答「一次风暴最多烧多少」。
 */
export function worstCaseRetryCost(
  nodes,
  policy,
) {
  validateNodes(nodes);
  validatePolicy(policy);
  const caps = nodes.map((node) => retryCap(node, policy));
  const baseCost = nodes.reduce((sum, node) => sum + node.attemptCostMicros, 0);
  const pool = Math.min(policy.globalRetryBudget, caps.reduce((sum, cap) => sum + cap, 0));
  const retryCosts = nodes
    .flatMap((node, index) => Array.from({ length: caps[index] }, () => node.attemptCostMicros))
    .sort((left, right) => right - left);
  const maxCost = baseCost + retryCosts.slice(0, pool).reduce((sum, cost) => sum + cost, 0);
  return {
    maxAttempts: nodes.length + pool,
    maxCostMicros: maxCost,
    amplification: baseCost === 0 ? 0 : Number((maxCost / baseCost).toFixed(4)),
  };
}

/**
 * 计数式熔断器：不用时钟，冷却按「被拒绝的调用数」推进，
 * 因而同一串调用序列永远得到同一组状态，适合放进确定性测试。
 */
export class NodeCircuitBreaker {
  nodeId;
  options;
  current = "closed";
  consecutiveFailures = 0;
  rejectedSinceOpen = 0;

  constructor(nodeId, options) {
    if (nodeId.trim() === "") fail("nodeId 不能为空");
    if (!Number.isInteger(options.failureThreshold) || options.failureThreshold < 1) {
      fail("failureThreshold 必须是 >= 1 的整数");
    }
    if (!Number.isInteger(options.halfOpenAfterCalls) || options.halfOpenAfterCalls < 1) {
      fail("halfOpenAfterCalls 必须是 >= 1 的整数");
    }
    this.nodeId = nodeId;
    this.options = options;
  }

  get state() {
    return this.current;
  }

  /** 调用前询问；false 表示本次被短路，不产生模型成本。 */
  allow() {
    if (this.current === "closed" || this.current === "half-open") return true;
    if (this.rejectedSinceOpen < this.options.halfOpenAfterCalls) {
      this.rejectedSinceOpen += 1;
      return false;
    }
    this.current = "half-open";
    return true;
  }

  record(success) {
    if (success) {
      this.consecutiveFailures = 0;
      this.rejectedSinceOpen = 0;
      this.current = "closed";
      return this.current;
    }
    this.consecutiveFailures += 1;
    if (this.current === "half-open" || this.consecutiveFailures >= this.options.failureThreshold) {
      this.current = "open";
      this.rejectedSinceOpen = 0;
    }
    return this.current;
  }
}

/** 回放一串「若被调用则成功/失败」的脚本；被拒绝的调用不消耗脚本结果。 */
export function traceBreaker(
  options,
  calls,
) {
  const breaker = new NodeCircuitBreaker("trace", options);
  let allowed = 0;
  let rejected = 0;
  let attempts = 0;
  const states = [];
  for (const wouldSucceed of calls) {
    if (breaker.allow()) {
      allowed += 1;
      attempts += 1;
      breaker.record(wouldSucceed);
    } else {
      rejected += 1;
    }
    states.push(breaker.state);
  }
  return { allowed, rejected, attempts, finalState: breaker.state, states };
}

/** 卷二三能力样本：检索 1,055、摘要 1,643、回复 1,088 微元。 */
export const ECHO_RETRY_NODES = [
  { id: "search.rerank", failureRate: 0.01, attemptCostMicros: 1_055, latencyMs: 160, maxRetries: 2, required: true },
  { id: "content.summarize", failureRate: 0.03, attemptCostMicros: 1_643, latencyMs: 620, maxRetries: 2, required: true },
  { id: "chat.reply", failureRate: 0.02, attemptCostMicros: 1_088, latencyMs: 420, maxRetries: 2, required: true },
];

export const ECHO_BUDGET_POLICY = {
  globalRetryBudget: 3,
  consecutiveFailureThreshold: 2,
  halfOpenAfterCalls: 3,
};
