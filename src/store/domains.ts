// The domains collection: the domains the service accepts mail for (documents: DomainDoc).
import type { DomainDoc } from './documents.ts';
import { insertWithNewId, isId } from './ids.ts';
import type { Store } from './mongo.ts';

export async function createDomain(store: Store, name: string): Promise<DomainDoc> {
  return insertWithNewId('d', async (id) => {
    const doc: DomainDoc = { _id: id, name, created_at: new Date() };
    await store.domains.insertOne(doc);
    return doc;
  });
}

export function listDomains(store: Store): Promise<DomainDoc[]> {
  return store.domains.find({}).sort({ _id: 1 }).toArray();
}

export function findDomainByName(store: Store, name: string): Promise<DomainDoc | null> {
  return store.domains.findOne({ name });
}

/** Deletes the domain and its routes; false when there was no such domain. */
export async function deleteDomain(store: Store, id: string): Promise<boolean> {
  if (!isId('d', id)) return false;
  const domain = await store.domains.findOne({ _id: id });
  if (!domain) return false;
  // routes first: a crash in between leaves a domain without routes, never routes without a domain
  await store.routes.deleteMany({ domain: domain.name });
  const result = await store.domains.deleteOne({ _id: id });
  return result.deletedCount === 1;
}
