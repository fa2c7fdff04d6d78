// A small typed use of the generated types (src/writerapi.gen.ts), compiled
// with tsc --noEmit by make generate-check: it stops compiling when the
// document changes a type a TypeScript client relies on, e.g. an amount or
// a problem's type that is no longer a string, or a dropped field.
import type { components, operations } from "./writerapi.gen";

type Schemas = components["schemas"];
export type Transaction = Schemas["Transaction"];
export type TransactionCreate = Schemas["TransactionCreate"];
export type Problem = Schemas["Problem"];
export type GatewayError = Schemas["GatewayError"];
export type Report = Schemas["Report"];
export type Rollup = Schemas["Rollup"];
export type RollupRange = Schemas["RollupRange"];

type CreateTransaction = operations["createTransaction"];

// Amounts are decimal strings: never parse them into a binary float.
const amountText: string = ({} as Transaction).amount;
const problemType: string = ({} as Problem).type;
export const typedAsStrings: [string, string] = [amountText, problemType];

// Exactly string, not a union a generator makes of string-or-number or of
// closed literals: a new problem type or status value is still a value of
// the type (open to additive change, docs/api.md "Compatibility").
type Exactly<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
export const amountIsString: Exactly<TransactionCreate["amount"], string> = true;
export const patchAmountIsString: Exactly<NonNullable<Schemas["TransactionPatch"]["amount"]>, string> = true;
export const problemTypeIsString: Exactly<Problem["type"], string> = true;
export const tenantStatusIsOpen: Exactly<Schemas["Tenant"]["status"], string> = true;
export const transactionTypeIsOpen: Exactly<Transaction["type"], string> = true;
// A tenant roll-up's amounts are decimal strings too, its branch count a number.
export const rollupNetIsString: Exactly<Rollup["net"], string> = true;
export const rollupBranchesIsNumber: Exactly<RollupRange["items"][number]["branches"], number> = true;
/** The currency a roll-up request names: an ISO 4217 code, or "-" for the branches without one. */
export type RollupQuery = NonNullable<operations["rollupRange"]["parameters"]["query"]>;
export const rollupCurrencyIsString: Exactly<NonNullable<RollupQuery["currency"]>, string> = true;

/** Whether the answer of a failed request is the writer's problem or API Gateway's own. */
export type Failure =
  | { kind: "problem"; status: number; problem: Problem }
  | { kind: "gateway"; status: number; error: GatewayError };

/** Reads a failed answer by its Content-Type (docs/api.md "Errors"). */
export async function readFailure(res: Response): Promise<Failure> {
  const contentType = res.headers.get("Content-Type") ?? "";
  if (contentType.startsWith("application/problem+json")) {
    const problem = (await res.json()) as Problem;
    return { kind: "problem", status: res.status, problem };
  }
  const error = (await res.json()) as GatewayError;
  return { kind: "gateway", status: res.status, error };
}

/** The problem types a client switches on; an unknown one is read by its status. */
const problemBase = "https://github.com/ledger-dev/ledger/blob/main/docs/api.md#";
export function retryable(f: Failure): boolean {
  if (f.kind === "gateway") {
    return f.status === 429 || f.status === 503 || f.status === 504;
  }
  switch (f.problem.type) {
    case problemBase + "request-in-progress":
    case problemBase + "rate-limited":
    case problemBase + "unavailable":
      return true;
    default:
      return f.status === 503;
  }
}

/** Creates a transaction; the amount goes as a string, e.g. "12.50". */
export async function createTransaction(
  base: string,
  token: string,
  path: CreateTransaction["parameters"]["path"],
  idempotencyKey: CreateTransaction["parameters"]["header"]["Idempotency-Key"],
  body: CreateTransaction["requestBody"]["content"]["application/json"],
): Promise<Transaction | Failure> {
  const url = `${base}/v1/tenants/${encodeURIComponent(path.tenant)}/branches/${encodeURIComponent(path.branch)}/transactions`;
  const res = await fetch(url, {
    method: "POST",
    headers: {
      Authorization: `Bearer ${token}`,
      "Content-Type": "application/json",
      "Idempotency-Key": idempotencyKey,
    },
    body: JSON.stringify(body),
  });
  if (res.status === 201) {
    return (await res.json()) as CreateTransaction["responses"][201]["content"]["application/json"];
  }
  return readFailure(res);
}

/** Adds up a report's income per category, exactly, in integer cents. */
export function incomeCents(report: Report): Map<string, bigint> {
  const out = new Map<string, bigint>();
  for (const [name, totals] of Object.entries(report.byCategory)) {
    out.set(name, cents(totals.totalIncome));
  }
  return out;
}

function cents(amount: string): bigint {
  const [units = "0", fraction = ""] = amount.replace(/^-/, "").split(".");
  const value = BigInt(units) * 100n + BigInt((fraction + "00").slice(0, 2));
  return amount.startsWith("-") ? -value : value;
}

export const example: TransactionCreate = { type: "EXPENSE", amount: "12.50", category: "food" };
